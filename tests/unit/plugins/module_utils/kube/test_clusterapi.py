# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The decisions of Cluster API replacement, on Machines and Nodes as the API server returns them.

Which Machine owns a node, which group brings a new one, which Node is the new one, and the
record a rerun resumes from. Deleting a real Machine and waiting for a real Node runs against the
lab's API server with Cluster API's CRD in tests/integration/remediation/test_node_replace.py.
"""

from __future__ import annotations

import datetime
from typing import Any, Dict, Optional

from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.clusterapi import (
    ReplaceRecord,
    machine_of_node,
    new_machines,
    node_ready,
    owning_group,
    parse_time,
    pick_new_node,
    rfc3339,
)

MD = "cluster.x-k8s.io/deployment-name"
MS = "cluster.x-k8s.io/set-name"


def machine(name: str, uid: str, node: Optional[str] = None, namespace: str = "capi",
            created: str = "2026-11-30T03:00:00Z", labels: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": namespace, "uid": uid, "creationTimestamp": created,
                     "labels": dict(labels or {})},
        "status": {"nodeRef": {"name": node}} if node else {},
    }


def in_md(name: str, uid: str, node: Optional[str] = None, md: str = "md-0", **kwargs: Any) -> Dict[str, Any]:
    found = machine(name, uid, node, **kwargs)
    found["metadata"]["labels"][MD] = md
    return found


def node(name: str, uid: str = "n-uid", ready: bool = True, **annotations: str) -> Dict[str, Any]:
    return {"metadata": {"name": name, "uid": uid, "annotations": dict(annotations)},
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def record(**overrides: Any) -> ReplaceRecord:
    values = dict(namespace="capi", machine="m-old", uid="u-old", group=(MD, "md-0"), since="2026-11-30T03:10:00Z",
                  machines_before=("u-old", "u-sib"))
    values.update(overrides)
    return ReplaceRecord(**values)


# ---------------------------------------------------------------- which Machine


def test_the_machine_named_by_the_node_annotations_in_their_namespace() -> None:
    machines = [machine("m1", "u1", namespace="other"), machine("m1", "u2", namespace="capi"),
                machine("m2", "u3", node="gpu-1")]
    found = node("gpu-1", **{"cluster.x-k8s.io/machine": "m1", "cluster.x-k8s.io/cluster-namespace": "capi"})
    assert machine_of_node(found, machines)["metadata"]["uid"] == "u2"


def test_the_machine_whose_node_ref_is_the_node_when_the_node_has_no_annotation() -> None:
    machines = [machine("m1", "u1", node="gpu-2"), machine("m2", "u2", node="gpu-1")]
    assert machine_of_node(node("gpu-1"), machines)["metadata"]["name"] == "m2"
    assert machine_of_node(node("gpu-9"), machines) is None
    # An annotation naming a Machine that is gone falls back to the nodeRef.
    stale = node("gpu-1", **{"cluster.x-k8s.io/machine": "deleted"})
    assert machine_of_node(stale, machines)["metadata"]["name"] == "m2"


def test_the_group_is_the_machine_deployment_else_the_machine_set_else_none() -> None:
    assert owning_group(in_md("m", "u", labels={MS: "md-0-abc"})) == (MD, "md-0")
    assert owning_group(machine("m", "u", labels={MS: "ms-1"})) == (MS, "ms-1")
    assert owning_group(machine("m", "u", labels={"cluster.x-k8s.io/cluster-name": "c"})) is None


# ---------------------------------------------------------------- which Node is new


def test_new_machines_are_those_not_there_before_the_delete() -> None:
    machines = [in_md("m-old", "u-old"), in_md("m-sib", "u-sib"), in_md("m-new", "u-new"),
                in_md("m-other", "u-other", md="md-1")]
    assert [m["metadata"]["name"] for m in new_machines(machines, record())] == ["m-new"]


def test_on_a_rerun_new_machines_are_those_created_since_the_delete() -> None:
    machines = [in_md("m-sib", "u-sib", created="2026-11-30T02:00:00Z"),
                in_md("m-new", "u-new", created="2026-11-30T03:10:00Z"),
                in_md("m-old", "u-old", created="2026-11-30T03:30:00Z")]
    rerun = record(machines_before=())
    assert [m["metadata"]["name"] for m in new_machines(machines, rerun)] == ["m-new"]


def test_the_new_node_is_ready_not_the_old_one_and_not_taken_by_another_replacement() -> None:
    machines = [in_md("m-sib", "u-sib", node="sibling"),
                in_md("m-a", "u-a", node="gpu-a", created="2026-11-30T03:11:00Z"),
                in_md("m-b", "u-b", node="gpu-b", created="2026-11-30T03:12:00Z")]
    nodes = {"sibling": node("sibling"), "gpu-a": node("gpu-a", ready=False), "gpu-b": node("gpu-b")}
    assert pick_new_node(machines, nodes, record(), "old", "uid-old") == "gpu-b"
    nodes["gpu-a"] = node("gpu-a")
    assert pick_new_node(machines, nodes, record(), "old", "uid-old") == "gpu-a"  # the oldest new Machine first
    nodes["gpu-a"] = node("gpu-a", **{"gpufleet.io/replaces": "someone-else"})
    assert pick_new_node(machines, nodes, record(), "old", "uid-old") == "gpu-b"
    nodes["gpu-a"] = node("gpu-a", **{"gpufleet.io/replaces": "old"})
    assert pick_new_node(machines, nodes, record(), "old", "uid-old") == "gpu-a"


def test_a_machine_that_reused_the_old_node_name_counts_only_with_a_new_node_uid() -> None:
    machines = [in_md("m-new", "u-new", node="old")]
    assert pick_new_node(machines, {"old": node("old", uid="uid-old")}, record(), "old", "uid-old") is None
    assert pick_new_node(machines, {"old": node("old", uid="uid-2")}, record(), "old", "uid-old") == "old"


def test_no_node_yet_is_none() -> None:
    assert pick_new_node([in_md("m-new", "u-new")], {}, record(), "old", None) is None
    assert pick_new_node([], {}, record(), "old", None) is None


# ---------------------------------------------------------------- the record


def test_the_record_round_trips_and_a_bad_one_is_none() -> None:
    original = record()
    assert ReplaceRecord.decode(original.encode()) == original
    assert original.machine_ref == "capi/m-old"
    assert original.group_ref == "MachineDeployment capi/md-0"
    assert record(group=(MS, "ms-1")).group_ref == "MachineSet capi/ms-1"
    for bad in (None, "", "{", "[]", '{"machine": "m"}'):
        assert ReplaceRecord.decode(bad) is None


def test_times_are_the_api_servers_rfc3339() -> None:
    moment = datetime.datetime(2026, 11, 30, 3, 10, 5, tzinfo=datetime.timezone.utc)
    assert rfc3339(moment) == "2026-11-30T03:10:05Z"
    assert parse_time("2026-11-30T03:10:05Z") == moment
    assert parse_time("not a time") is None and parse_time(None) is None


def test_node_ready() -> None:
    assert node_ready(node("n")) and not node_ready(node("n", ready=False)) and not node_ready({})
