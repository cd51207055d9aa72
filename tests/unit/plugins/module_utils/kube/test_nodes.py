# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The pure part of node labelling and tainting: which patch a node needs.

The race itself (a taint added between our read and our write) is proven against the lab's
real kube-apiserver in tests/integration/kube/test_node_pool_members.py.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Optional

from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.nodes import (
    MANAGED_LABELS,
    MANAGED_TAINTS,
    plan_node_edit,
)

NO_SCHED = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
CORDON = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}


def node(
    labels: Optional[Dict[str, str]] = None,
    taints: Optional[List[Dict[str, Any]]] = None,
    managed_labels: Optional[List[str]] = None,
    managed_taints: Optional[List[List[str]]] = None,
) -> Dict[str, Any]:
    annotations = {}
    if managed_labels is not None:
        annotations[MANAGED_LABELS] = json.dumps(sorted(managed_labels))
    if managed_taints is not None:
        annotations[MANAGED_TAINTS] = json.dumps(sorted(managed_taints))
    return {
        "metadata": {"name": "n1", "resourceVersion": "42", "labels": labels or {}, "annotations": annotations},
        "spec": {"taints": taints} if taints is not None else {},
    }


def test_a_fresh_node_gets_labels_taints_and_the_ownership_record_with_its_resource_version() -> None:
    edit = plan_node_edit(
        node(labels={"kubernetes.io/os": "linux"}, taints=[CORDON]), {"gpufleet.io/pool": "h100"}, [NO_SCHED]
    )
    assert edit.changed
    assert edit.patch["metadata"]["resourceVersion"] == "42"
    assert edit.patch["metadata"]["labels"] == {"gpufleet.io/pool": "h100"}
    # Someone else's cordon taint stays, in place, and ours is added.
    assert edit.patch["spec"]["taints"] == [CORDON, NO_SCHED]
    assert json.loads(edit.patch["metadata"]["annotations"][MANAGED_TAINTS]) == [["nvidia.com/gpu", "NoSchedule"]]
    assert json.loads(edit.patch["metadata"]["annotations"][MANAGED_LABELS]) == ["gpufleet.io/pool"]
    assert edit.after["labels"] == {"kubernetes.io/os": "linux", "gpufleet.io/pool": "h100"}


def test_a_node_as_wanted_needs_no_patch() -> None:
    current = node(
        labels={"gpufleet.io/pool": "h100"},
        taints=[CORDON, NO_SCHED],
        managed_labels=["gpufleet.io/pool"],
        managed_taints=[["nvidia.com/gpu", "NoSchedule"]],
    )
    edit = plan_node_edit(current, {"gpufleet.io/pool": "h100"}, [NO_SCHED])
    assert not edit.changed
    assert edit.patch == {}


def test_what_the_pool_no_longer_wants_is_removed_and_nothing_else() -> None:
    current = node(
        labels={"gpufleet.io/pool": "h100", "gpufleet.io/tier": "training", "team": "ml"},
        taints=[NO_SCHED, {"key": "team", "value": "ml", "effect": "NoSchedule"}],
        managed_labels=["gpufleet.io/pool", "gpufleet.io/tier"],
        managed_taints=[["nvidia.com/gpu", "NoSchedule"]],
    )
    edit = plan_node_edit(current, {"gpufleet.io/pool": "h100"}, [])
    # null deletes a key in a JSON merge patch.
    assert edit.patch["metadata"]["labels"] == {"gpufleet.io/tier": None}
    assert edit.patch["spec"]["taints"] == [{"key": "team", "value": "ml", "effect": "NoSchedule"}]
    assert edit.after["labels"] == {"gpufleet.io/pool": "h100", "team": "ml"}


def test_a_changed_taint_value_replaces_ours_and_keeps_time_added() -> None:
    ours = {"key": "nvidia.com/gpu", "value": "old", "effect": "NoExecute", "timeAdded": "2026-11-30T10:00:00Z"}
    current = node(taints=[ours], managed_labels=[], managed_taints=[["nvidia.com/gpu", "NoExecute"]])
    edit = plan_node_edit(current, {}, [{"key": "nvidia.com/gpu", "value": "new", "effect": "NoExecute"}])
    assert edit.patch["spec"]["taints"] == [
        {"key": "nvidia.com/gpu", "value": "new", "effect": "NoExecute", "timeAdded": "2026-11-30T10:00:00Z"}
    ]


def test_a_taint_someone_else_set_with_our_key_and_effect_is_taken_over_not_duplicated() -> None:
    edit = plan_node_edit(node(taints=[{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]), {}, [NO_SCHED])
    assert edit.patch["spec"]["taints"] == [NO_SCHED]
