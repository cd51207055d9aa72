"""The fleet overview of playbooks/fleet_status.yml: what each node's objects say, and the lines."""

from __future__ import annotations

import json
import time

from ansible_collections.gpufleet.resilience.plugins.module_utils.fleet.overview import overview, overview_table
from ansible_collections.gpufleet.resilience.plugins.module_utils.health import gpu_condition
from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation import progress as progress_rules
from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation.plans import plan_for


def node(name, taints=(), labels=None, annotations=None, healthy=True):
    return {
        "metadata": {"name": name, "labels": dict({"gpufleet.io/pool": "gpu-a"}, **(labels or {})),
                     "annotations": dict(annotations or {})},
        "spec": {"taints": [{"key": key, "effect": "NoSchedule"} for key in taints]},
        "status": {"allocatable": {"nvidia.com/gpu": "8"},
                   "conditions": [{"type": "Ready", "status": "True"},
                                  {"type": gpu_condition.CONDITION_TYPE, "status": "True" if healthy else "False",
                                   "reason": "GpuHealthy" if healthy else "GpuFatal",
                                   "message": "healthy" if healthy else "fatal, RESTART_BM: GPU 3: XID 79"}]},
    }


def remediation_annotation(node_name, done=("fence", "quarantine"), result=None):
    # What the remediation writes on the Node with each phase (remediation/progress.py annotation()).
    record = progress_rules.new_progress("r-1-%s" % node_name, node_name, plan_for("RESTART_BM"), {}, {},
                                         time.time(), {})
    record["phases"] = {phase: {"at": time.time()} for phase in done}
    if result:
        record = progress_rules.finish(record, result, time.time())
    return {"gpufleet.io/remediation": progress_rules.annotation(record)}


def test_each_node_says_if_it_is_quarantined_held_or_under_remediation():
    nodes = [
        node("gpu-a-001"),
        node("gpu-a-002", taints=["gpufleet.io/gpu-unhealthy"], annotations=remediation_annotation("gpu-a-002"),
             healthy=False),
        node("gpu-a-003", taints=["gpufleet.io/gpu-unhealthy"], labels={"gpufleet.io/remediation-hold": "true"},
             annotations=remediation_annotation("gpu-a-003", result="stopped")),
        node("gpu-a-004", taints=["other.io/taint"]),
    ]
    view = overview(nodes, [], {"tripped": False, "slots": [["gpu-a-002", 1.0]]}, None)
    rows = {row["name"]: row for row in view["nodes"]}
    assert [rows[n]["quarantined"] for n in sorted(rows)] == [False, True, True, False]
    assert view["quarantined"] == ["gpu-a-002", "gpu-a-003"] and view["held"] == ["gpu-a-003"]
    # Only the open remediation is under way; the finished one stays on its row.
    assert [r["node"] for r in view["remediations"]] == ["gpu-a-002"]
    assert "RESTART_BM, at " in view["remediations"][0]["summary"]
    assert rows["gpu-a-003"]["remediation"]["result"] == "stopped" and not rows["gpu-a-003"]["remediating"]
    assert rows["gpu-a-002"]["agent"] == "fatal"
    assert view["drills"] == [] and view["faults"] == [] and view["kill_switch"] == {}


def test_a_site_s_own_taint_and_hold_label_are_the_ones_read():
    nodes = [node("n1", taints=["site.io/bad-gpu"], labels={"site.io/hold": "true"})]
    view = overview(nodes, [], {}, {}, quarantine_taint="site.io/bad-gpu", hold_label="site.io/hold")
    assert view["quarantined"] == ["n1"] and view["held"] == ["n1"]
    assert overview(nodes, [], {}, {})["quarantined"] == []


def test_an_annotation_that_is_not_json_is_said_so_not_raised():
    view = overview([node("n1", annotations={"gpufleet.io/remediation": "{not json"})], [], {}, {})
    assert view["nodes"][0]["remediation_summary"] == "unreadable gpufleet.io/remediation annotation"


def test_the_table_has_a_line_per_node_then_breaker_remediations_holds_and_drills():
    nodes = [node("gpu-a-001"), node("gpu-a-002", taints=["gpufleet.io/gpu-unhealthy"],
                                     annotations=remediation_annotation("gpu-a-002"), healthy=False)]
    ledger = {"drills": [{"id": "d-7"}], "faults": [{"id": "f-7", "experiment": "gpu_xid", "node": "gpu-a-002"}],
              "kill_switch": {"on": True, "why": "game day over"}}
    breaker = {"tripped": True, "tripped_at": 1700000000.0, "tripped_why": "3 of 4 nodes in 10 minutes",
               "refused": ["gpu-a-004"], "slots": []}
    lines = overview_table(overview(nodes, [], breaker, ledger))
    assert lines[0].split() == ["NODE", "POOL", "K8S", "SLURM", "AGENT", "QUARANTINED", "HELD", "REMEDIATION"]
    assert lines[1].split()[:7] == ["gpu-a-001", "gpu-a", "Ready", "-", "healthy", "no", "no"]
    assert lines[2].split()[:7] == ["gpu-a-002", "gpu-a", "Ready", "-", "fatal", "yes", "no"]
    assert "r-1-gpu-a-002: RESTART_BM" in lines[2]
    assert lines[3] == "breaker: OPEN since 1700000000.0: 3 of 4 nodes in 10 minutes; refused: gpu-a-004"
    assert lines[4].startswith("remediations under way: gpu-a-002 (r-1-gpu-a-002: RESTART_BM")
    assert lines[5] == "held for a human: none"
    assert lines[6] == "drills: d-7; faults active: gpu_xid on gpu-a-002; KILL SWITCH ON (game day over)"
    json.dumps(overview(nodes, [], breaker, ledger))  # the JSON form must serialise
