from __future__ import annotations

from ansible_collections.gpufleet.resilience.plugins.module_utils.fleet.status import fleet_status, fleet_table


def node(name, ready=True, cordoned=False, gpus="8", gpu_healthy=None):
    conditions = [{"type": "Ready", "status": "True" if ready else "Unknown"}]
    if gpu_healthy is not None:
        conditions.append(dict(gpu_healthy, type="GpuHealthy"))
    return {
        "metadata": {"name": name, "labels": {"gpufleet.io/pool": "gpu-a", "gpufleet.io/rack": "gpu-a-rack-1"}},
        "spec": {"unschedulable": True} if cordoned else {},
        "status": {"allocatable": {"nvidia.com/gpu": gpus}, "conditions": conditions},
    }


def test_joins_kubernetes_and_slurm_by_name():
    rows = fleet_status(
        [node("gpu-a-002", cordoned=True), node("gpu-a-001"), node("gpu-a-003", ready=False)],
        ["gpu-a-001|idle|gpu:8|none", "gpu-a-002|drained|gpu:8|XID 79", "gpu-a-009|idle|gpu:8|none"],
        {"gpu-a-002": {"verdict": "fatal", "reason": "GPU 3: XID 79", "gpus": [{}] * 8}},
    )
    by_name = {row["name"]: row for row in rows}
    assert [row["name"] for row in rows] == ["gpu-a-001", "gpu-a-002", "gpu-a-003", "gpu-a-009"]
    assert by_name["gpu-a-001"]["k8s"] == "Ready" and by_name["gpu-a-001"]["slurm_state"] == "idle"
    assert by_name["gpu-a-002"]["cordoned"] is True and by_name["gpu-a-002"]["slurm_reason"] == "XID 79"
    assert by_name["gpu-a-002"]["health"] == "fatal" and by_name["gpu-a-002"]["gpus_seen"] == 8
    assert by_name["gpu-a-003"]["k8s"] == "NotReady" and by_name["gpu-a-003"]["slurm_state"] is None
    assert by_name["gpu-a-009"]["k8s"] == "absent"
    assert by_name["gpu-a-001"]["gpus"] == 8


def test_table_has_a_header_and_a_line_per_node():
    rows = fleet_status([node("gpu-a-001"), node("gpu-a-002", cordoned=True)],
                        ["gpu-a-001|idle|gpu:8|none", "gpu-a-002|drained|gpu:8|XID 79 fenced"])
    lines = fleet_table(rows)
    assert lines[0].split() == ["NODE", "K8S", "CORDONED", "SLURM", "GPUS", "HEALTH", "AGENT", "REASON"]
    assert lines[1].split()[:4] == ["gpu-a-001", "Ready", "no", "idle"]
    assert lines[2].split()[:4] == ["gpu-a-002", "Ready", "yes", "drained"]
    assert lines[2].endswith("XID 79 fenced")


def test_takes_the_nodes_of_slurm_node_info():
    """slurm_node_info's nodes give the same rows as the sinfo lines did."""
    from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.model import SlurmNode

    module_nodes = [node.as_dict() for node in (
        SlurmNode("gpu-a-001", "IDLE", gres="gpu:8"),
        SlurmNode("gpu-a-002", "IDLE", ("DRAIN",), reason="XID 79 fenced", gres="gpu:8"),
        SlurmNode("gpu-a-003", "DOWN", ("NOT_RESPONDING",), reason="Not responding", gres="gpu:8"))]
    sinfo_lines = ["gpu-a-001|idle|gpu:8|none", "gpu-a-002|drained|gpu:8|XID 79 fenced",
                   "gpu-a-003|down*|gpu:8|Not responding"]
    k8s = [node("gpu-a-001"), node("gpu-a-002", cordoned=True), node("gpu-a-003", ready=False)]
    from_module = fleet_status(k8s, module_nodes)
    assert from_module == fleet_status(k8s, sinfo_lines)
    assert fleet_table(from_module) == fleet_table(fleet_status(k8s, sinfo_lines))
    assert [row["slurm_state"] for row in from_module] == ["idle", "drained", "down*"]


def test_the_agent_verdict_comes_from_the_gpu_healthy_condition():
    message = "fatal, RESTART_BM: GPU 3 (GPU-x, 0000:3b:00.0): XID 79 GPU has fallen off the bus -> RESTART_BM"
    rows = fleet_status([
        node("gpu-a-001", gpu_healthy={"status": "True", "reason": "GpusHealthy", "message": "8 GPUs healthy"}),
        node("gpu-a-002", gpu_healthy={"status": "False", "reason": "Xid79", "message": message}),
        node("gpu-a-003", gpu_healthy={"status": "Unknown", "reason": "NvmlUnavailable", "message": "no NVML"}),
        node("gpu-a-004"),
    ], ["gpu-a-001|idle|gpu:8|none", "gpu-a-002|idle|gpu:8|none"])
    assert [row["agent"] for row in rows] == ["healthy", "fatal", "unknown", None]
    lines = fleet_table(rows)
    assert lines[2].split()[6] == "fatal" and lines[2].endswith(message)
    assert lines[1].split()[6] == "healthy" and lines[4].split()[6] == "-"
