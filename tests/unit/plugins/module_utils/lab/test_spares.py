# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The lab's node recipes and the steps of bringing a node online that need no cluster: reading
the recipes, choosing a spare, fresh fake GPUs, processes by recorded PID, scrape targets, jobs.

Kubernetes and Slurm are never faked here: activate and retire as a whole run against the real
lab in tests/integration/remediation/test_node_replace.py. The Slurm side of the job check is
our own SlurmClient interface, faked with SlurmJob values.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Dict, List

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.lab import fake_gpu_state, process
from ansible_collections.gpufleet.resilience.plugins.module_utils.lab.spares import (
    LabNodeError,
    LabNodes,
    gpus_as_recorded,
    load_recipes,
    node_ready,
    node_recipe,
    pick_spare,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.model import SlurmJob

PRODUCT = "NVIDIA-H100-80GB-HBM3"
SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]


def write(lab: Path, pool: str, filename: str, data: Dict[str, Any]) -> None:
    path = lab / "recipes" / pool / filename
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def sleeper(lab: Path, name: str) -> Dict[str, Any]:
    return {"name": name, "argv": list(SLEEPER), "run_dir": str(lab / "run"), "log_dir": str(lab / "log")}


def make_lab(lab: Path, pool: str = "gpu-a", count: int = 2, spares: int = 2) -> List[str]:
    """The four recipe files the roles write, for ``count`` active nodes and ``spares`` spares."""
    names = ["%s-%03d" % (pool, n) for n in range(1, count + spares + 1)]
    spare = {name: index >= count for index, name in enumerate(names)}
    write(lab, pool, "10-kube-node.json", {"part": "kube-node", "pool": pool, "ready_timeout": 120, "nodes": {
        name: {"spare": spare[name], "manifest": {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}}
        for name in names}})
    write(lab, pool, "20-fake-gpus.json", {"part": "fake-gpus", "pool": pool, "nodes": {
        name: {"spare": spare[name], "dir": str(lab / "gpus" / name), "count": 2, "product": PRODUCT}
        for name in names}})
    slurmd = {name: {"spare": spare[name], "process": sleeper(lab, "slurmd-" + name)} for name in names}
    write(lab, pool, "30-slurmd.json", {"part": "slurmd", "pool": pool, "slurm_conf": "/x/slurm.conf",
                                        "bin_dir": "/usr/bin", "nodes": slurmd})
    write(lab, pool, "40-agent.json", {"part": "agent", "pool": pool, "nodes": {
        name: {"spare": spare[name], "process": sleeper(lab, "health-agent-" + name),
               "target": {"path": str(lab / "targets" / ("agent-%s.json" % name)), "text": "[%s]\n" % name}}
        for name in names}})
    return names


@pytest.fixture
def lab(tmp_path: Path):
    yield tmp_path
    process.stop_all(str(tmp_path / "run"), check_mode=False, stop_timeout=2)


# ---------------------------------------------------------------- recipes


def test_recipes_merge_the_parts_of_each_node_with_their_pool_settings(lab: Path) -> None:
    names = make_lab(lab)
    make_lab(lab, pool="gpu-b", count=1, spares=0)
    recipes = load_recipes(str(lab))
    assert list(recipes) == [*names, "gpu-b-001"]
    spare = recipes["gpu-a-003"]
    assert (spare.pool, spare.spare) == ("gpu-a", True)
    assert not recipes["gpu-a-001"].spare
    assert spare.parts["slurmd"]["slurm_conf"] == "/x/slurm.conf"  # a pool setting, on every node
    assert spare.parts["slurmd"]["process"]["name"] == "slurmd-gpu-a-003"
    assert spare.parts["kube-node"]["manifest"]["metadata"]["name"] == "gpu-a-003"
    assert spare.parts["kube-node"]["ready_timeout"] == 120
    assert set(spare.parts) == {"kube-node", "fake-gpus", "slurmd", "agent"}


def test_no_recipes_is_no_nodes_and_a_bad_file_is_named(lab: Path) -> None:
    assert load_recipes(str(lab / "nowhere")) == {}
    make_lab(lab)
    (lab / "recipes" / "gpu-a" / "30-slurmd.json").write_text("{not json")
    with pytest.raises(LabNodeError, match=r"recipes/gpu-a/30-slurmd.json: unreadable recipe"):
        load_recipes(str(lab))
    write(lab, "gpu-a", "30-slurmd.json", {"part": "agent", "pool": "gpu-a", "nodes": {}})
    with pytest.raises(LabNodeError, match="not a slurmd recipe of pool gpu-a"):
        load_recipes(str(lab))


def test_a_node_in_two_pools_is_refused(lab: Path) -> None:
    make_lab(lab)
    write(lab, "gpu-b", "10-kube-node.json", {"part": "kube-node", "pool": "gpu-b", "nodes": {"gpu-a-001": {}}})
    with pytest.raises(LabNodeError, match="node gpu-a-001 is also in pool"):
        load_recipes(str(lab))


def test_an_unknown_node_is_a_field_error_naming_the_pools(lab: Path) -> None:
    make_lab(lab)
    recipes = load_recipes(str(lab))
    with pytest.raises(FieldError, match=r"^spare: 'gpu-z-001' is not a node of any pool of the lab \(gpu-a\)") as err:
        node_recipe(recipes, "gpu-z-001", "spare", str(lab))
    assert err.value.field == "spare"
    with pytest.raises(FieldError, match="has no node recipes"):
        node_recipe({}, "gpu-a-001", "name", str(lab))


def test_a_node_missing_a_part_says_which_role_to_run_again(lab: Path) -> None:
    make_lab(lab)
    (lab / "recipes" / "gpu-a" / "40-agent.json").unlink()
    with pytest.raises(LabNodeError, match="node gpu-a-001 has no agent recipe"):
        node_recipe(load_recipes(str(lab)), "gpu-a-001", "name", str(lab))


# ---------------------------------------------------------------- choosing a spare


def test_the_first_spare_not_in_service_not_taken_and_never_a_retired_node(lab: Path) -> None:
    make_lab(lab, count=3, spares=2)
    recipes = load_recipes(str(lab))
    in_service = {"gpu-a-001", "gpu-a-003"}  # gpu-a-002 was retired by an earlier replacement
    assert pick_spare(recipes, "gpu-a-001", in_service.__contains__) == "gpu-a-004"
    assert pick_spare(recipes, "gpu-a-001", in_service.__contains__, taken=["gpu-a-004"]) == "gpu-a-005"
    in_service |= {"gpu-a-004", "gpu-a-005"}
    assert pick_spare(recipes, "gpu-a-001", in_service.__contains__) is None


def test_spares_of_another_pool_are_not_taken(lab: Path) -> None:
    make_lab(lab, count=1, spares=0)
    make_lab(lab, pool="gpu-b", count=1, spares=1)
    recipes = load_recipes(str(lab))
    assert pick_spare(recipes, "gpu-a-001", lambda name: False) is None
    assert pick_spare(recipes, "gpu-b-001", lambda name: False) == "gpu-b-002"


# ---------------------------------------------------------------- node parts


def test_node_ready_needs_ready_and_no_not_ready_taint() -> None:
    ready = {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    assert node_ready(ready)
    not_ready_taint = {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}
    assert not node_ready(dict(ready, spec={"taints": [not_ready_taint]}))
    assert not node_ready({"status": {"conditions": [{"type": "Ready", "status": "False"}]}})
    assert not node_ready({})


def test_gpus_as_recorded_reads_health_count_product_and_pending_events(tmp_path: Path) -> None:
    state_dir = str(tmp_path / "gpus")
    assert not gpus_as_recorded(None, 2, PRODUCT)
    fake_gpu_state.init(state_dir, 2, "n1", PRODUCT)
    assert gpus_as_recorded(fake_gpu_state.read(state_dir), 2, PRODUCT)
    assert not gpus_as_recorded(fake_gpu_state.read(state_dir), 4, PRODUCT)
    assert not gpus_as_recorded(fake_gpu_state.read(state_dir), 2, "NVIDIA-A100-SXM4-80GB")
    fake_gpu_state.set_fields(state_dir, 1, temperature=95)
    assert not gpus_as_recorded(fake_gpu_state.read(state_dir), 2, PRODUCT)
    fake_gpu_state.clear(state_dir)
    fake_gpu_state.inject_xid(state_dir, 0, 79)
    assert not gpus_as_recorded(fake_gpu_state.read(state_dir), 2, PRODUCT)


def nodes_without_clusters(lab: Path, slurm: Any = None) -> LabNodes:
    """LabNodes for the steps that use neither Kubernetes nor Slurm (kube=None fails loudly if used)."""
    return LabNodes(str(lab), kube=None, slurm=slurm, wait_timeout=5, sleep=lambda s: None)


def test_fresh_gpus_for_a_node_out_of_service_never_for_one_in_service(lab: Path) -> None:
    make_lab(lab)
    nodes = nodes_without_clusters(lab)
    recipe = nodes.recipe("gpu-a-003")
    gpus = str(lab / "gpus" / "gpu-a-003")
    actions: List[str] = []
    nodes._activate_gpus(recipe, in_service=False, check_mode=True, actions=actions)
    assert actions == ["give gpu-a-003 2 healthy fake GPUs"] and not Path(gpus).exists()
    actions = []
    nodes._activate_gpus(recipe, in_service=False, check_mode=False, actions=actions)
    assert actions and gpus_as_recorded(fake_gpu_state.read(gpus), 2, PRODUCT)
    uuids = [gpu["uuid"] for gpu in fake_gpu_state.read(gpus)["gpus"]]
    actions = []
    nodes._activate_gpus(recipe, in_service=False, check_mode=False, actions=actions)
    assert actions == []  # already fresh
    # A fault on a node in service is the agent's to see, not ours to wipe.
    fake_gpu_state.inject_xid(gpus, 1, 79)
    nodes._activate_gpus(recipe, in_service=True, check_mode=False, actions=actions)
    assert actions == [] and fake_gpu_state.read(gpus)["pending_events"]
    # Out of service (a node put back after repair): healthy again, same GPUs.
    nodes._activate_gpus(recipe, in_service=False, check_mode=False, actions=actions)
    state = fake_gpu_state.read(gpus)
    assert actions and gpus_as_recorded(state, 2, PRODUCT) and [gpu["uuid"] for gpu in state["gpus"]] == uuids


def test_agent_starts_once_and_publishes_its_target_then_stops_by_record(lab: Path) -> None:
    make_lab(lab)
    nodes = nodes_without_clusters(lab)
    recipe = nodes.recipe("gpu-a-003")
    target = lab / "targets" / "agent-gpu-a-003.json"
    actions: List[str] = []
    nodes._activate_agent(recipe, check_mode=True, actions=actions)
    assert actions == ["start health-agent-gpu-a-003", "publish scrape target %s" % target]
    assert not target.exists() and process.read_record(str(lab / "run"), "health-agent-gpu-a-003") is None
    actions = []
    nodes._activate_agent(recipe, check_mode=False, actions=actions)
    assert actions == ["start health-agent-gpu-a-003", "publish scrape target %s" % target]
    assert target.read_text() == "[gpu-a-003]\n" and oct(target.stat().st_mode & 0o777) == "0o644"
    pid = process.read_record(str(lab / "run"), "health-agent-gpu-a-003").pid
    actions = []
    nodes._activate_agent(recipe, check_mode=False, actions=actions)
    assert actions == [] and process.read_record(str(lab / "run"), "health-agent-gpu-a-003").pid == pid
    nodes._stop("gpu-a-003", recipe.parts["agent"], check_mode=True, actions=actions)
    assert actions == ["stop health-agent-gpu-a-003"]
    actions = []
    nodes._stop("gpu-a-003", recipe.parts["agent"], check_mode=False, actions=actions)
    assert actions == ["stop health-agent-gpu-a-003"]
    assert process.read_record(str(lab / "run"), "health-agent-gpu-a-003") is None
    actions = []
    nodes._stop("gpu-a-003", recipe.parts["agent"], check_mode=False, actions=actions)
    assert actions == []


def test_slurmd_alive_follows_the_pid_record(lab: Path) -> None:
    make_lab(lab)
    nodes = nodes_without_clusters(lab)
    assert not nodes.slurmd_alive("gpu-a-001")
    nodes._start("gpu-a-001", nodes.recipe("gpu-a-001").parts["slurmd"], check_mode=False, actions=[])
    assert nodes.slurmd_alive("gpu-a-001")


class JobsOnly:
    """Our SlurmClient's jobs(), answering from a script of SlurmJob lists."""

    def __init__(self, answers: List[List[SlurmJob]]) -> None:
        self.answers = answers
        self.calls = 0

    def jobs(self, nodes=None, states=None) -> List[SlurmJob]:
        answer = self.answers[min(self.calls, len(self.answers) - 1)]
        self.calls += 1
        return answer


def job(job_id: str, state: str, *flags: str) -> SlurmJob:
    return SlurmJob(job_id=job_id, state=state, flags=tuple(flags), nodelist="gpu-a-001", nodes=("gpu-a-001",))


def test_jobs_refuse_at_once_completing_ones_are_waited_for(lab: Path) -> None:
    make_lab(lab)
    running = JobsOnly([[job("7", "RUNNING"), job("8", "COMPLETED")]])
    with pytest.raises(LabNodeError, match=r"node gpu-a-001 still has jobs 7 \(RUNNING\): requeue or cancel"):
        nodes_without_clusters(lab, running).check_no_jobs("gpu-a-001")
    assert running.calls == 1
    leaving = JobsOnly([[job("9", "COMPLETED", "COMPLETING")], [job("9", "COMPLETED", "COMPLETING")], []])
    nodes_without_clusters(lab, leaving).check_no_jobs("gpu-a-001")
    assert leaving.calls == 3
    # Slurm 22.05 gives COMPLETING as the job's state, with no flag.
    leaving_22_05 = JobsOnly([[job("9", "COMPLETING")], []])
    nodes_without_clusters(lab, leaving_22_05).check_no_jobs("gpu-a-001")
    assert leaving_22_05.calls == 2
    clock = iter(range(0, 1000, 10))
    stuck = LabNodes(str(lab), kube=None, slurm=JobsOnly([[job("9", "COMPLETED", "COMPLETING")]]), wait_timeout=30,
                     sleep=lambda s: None, clock=lambda: float(next(clock)))
    with pytest.raises(LabNodeError, match=r"still has jobs 9 \(COMPLETED\+COMPLETING\)"):
        stuck.check_no_jobs("gpu-a-001")
