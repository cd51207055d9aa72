# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The pure part of a node quarantine: which merge patch quarantines a node, which undoes it.

The writes themselves, the 409 of a concurrent writer and the node lifecycle controller's own
cordon taint are proven against the lab's kube-apiserver in
tests/integration/remediation/test_kube_modules.py.
"""

from __future__ import annotations

import copy
import json
from datetime import datetime, timezone
from typing import Any, Dict, List, Optional

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.nodes import NodeEdit, NodeResult
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.quarantine import (
    QUARANTINE_ANNOTATION,
    QuarantineSpec,
    plan_quarantine,
    plan_release,
    quarantine_node,
    read_record,
)

NOW = datetime(2026, 11, 30, 3, 0, 12, tzinfo=timezone.utc)
LATER = datetime(2026, 11, 30, 4, 0, 0, tzinfo=timezone.utc)
OURS = {"key": "gpufleet.io/gpu-unhealthy", "effect": "NoSchedule"}
OTHER = {"key": "example.com/maintenance", "value": "now", "effect": "NoSchedule"}
CORDON = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
SPEC = QuarantineSpec(reason="Xid79 GPU-fc522a91", remediation_id="r-1")


def node(
    unschedulable: Optional[bool] = None,
    taints: Optional[List[Dict[str, Any]]] = None,
    annotations: Optional[Dict[str, str]] = None,
) -> Dict[str, Any]:
    spec: Dict[str, Any] = {}
    if unschedulable is not None:
        spec["unschedulable"] = unschedulable
    if taints is not None:
        spec["taints"] = taints
    meta = {
        "name": "gpu-a-003",
        "resourceVersion": "42",
        "annotations": {"kwok.x-k8s.io/node": "fake", **(annotations or {})},
    }
    return {"metadata": meta, "spec": spec}


def merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch, as the API server applies a merge-patch+json body."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge(result.get(key), value)
    return result


def written(current: Dict[str, Any], edit: NodeEdit) -> Dict[str, Any]:
    """The node after the patch, with the next resourceVersion (as the API server stores it)."""
    after = merge(current, edit.patch)
    after["metadata"]["resourceVersion"] = str(int(current["metadata"]["resourceVersion"]) + 1)
    return after


def test_a_healthy_node_is_cordoned_tainted_and_recorded_in_one_patch_with_its_resource_version() -> None:
    current = node(taints=[OTHER])
    edit = plan_quarantine(current, SPEC, NOW)
    assert edit.changed
    assert edit.patch["metadata"]["resourceVersion"] == "42"
    assert edit.patch["spec"] == {"unschedulable": True, "taints": [OTHER, OURS]}
    record = json.loads(edit.patch["metadata"]["annotations"][QUARANTINE_ANNOTATION])
    assert record == {
        "reason": "Xid79 GPU-fc522a91",
        "remediation_id": "r-1",
        "since": "2026-11-30T03:00:12Z",
        "cordoned_by": "gpufleet",
        "tainted_by": "gpufleet",
        "taint": OURS,
    }
    # Other annotations are not in the patch, so the merge patch keeps them.
    assert set(edit.patch["metadata"]["annotations"]) == {QUARANTINE_ANNOTATION}
    assert edit.before == {"unschedulable": False, "taints": [OTHER], "quarantine": None}
    assert edit.after == {"unschedulable": True, "taints": [OTHER, OURS], "quarantine": record}


def test_a_quarantined_node_needs_no_patch_even_later() -> None:
    current = written(node(), plan_quarantine(node(), SPEC, NOW))
    again = plan_quarantine(current, SPEC, LATER)
    assert not again.changed and again.patch == {}
    assert again.after["quarantine"]["since"] == "2026-11-30T03:00:12Z"


def test_a_cordon_and_a_taint_that_were_there_before_are_recorded_as_not_ours() -> None:
    someone = {"key": "gpufleet.io/gpu-unhealthy", "value": "agent", "effect": "NoSchedule"}
    edit = plan_quarantine(node(unschedulable=True, taints=[CORDON, someone]), SPEC, NOW)
    assert "spec" not in edit.patch  # nothing to cordon, the taint is there (its value untouched)
    record = json.loads(edit.patch["metadata"]["annotations"][QUARANTINE_ANNOTATION])
    assert record["cordoned_by"] == "already" and record["tainted_by"] == "already"
    assert record["taint"] == someone


def test_a_new_reason_updates_the_record_and_keeps_since_and_ownership() -> None:
    current = written(node(), plan_quarantine(node(), SPEC, NOW))
    edit = plan_quarantine(current, QuarantineSpec(reason="Xid79 again", remediation_id="r-2"), LATER)
    assert "spec" not in edit.patch
    record = json.loads(edit.patch["metadata"]["annotations"][QUARANTINE_ANNOTATION])
    assert record["reason"] == "Xid79 again" and record["remediation_id"] == "r-2"
    assert record["since"] == "2026-11-30T03:00:12Z" and record["cordoned_by"] == "gpufleet"
    # Omitted reason and id keep the record's.
    assert not plan_quarantine(written(current, edit), QuarantineSpec(), LATER).changed


def test_an_uncordon_by_someone_else_during_the_quarantine_is_put_back_as_ours() -> None:
    quarantined = written(node(), plan_quarantine(node(), SPEC, NOW))
    quarantined["spec"].pop("unschedulable")
    edit = plan_quarantine(quarantined, SPEC, LATER)
    assert edit.patch["spec"] == {"unschedulable": True}
    assert "metadata" in edit.patch and "annotations" not in edit.patch["metadata"]


def test_time_added_of_a_no_execute_taint_is_no_change() -> None:
    spec = QuarantineSpec(taint_effect="NoExecute", reason="r")
    current = written(node(), plan_quarantine(node(), spec, NOW))
    # The API server stamps NoExecute taints with timeAdded.
    current["spec"]["taints"][0]["timeAdded"] = "2026-11-30T03:00:12Z"
    assert not plan_quarantine(current, spec, LATER).changed


@pytest.mark.parametrize(
    "before",
    [
        node(),
        node(taints=[OTHER]),
        node(unschedulable=True, taints=[CORDON, OTHER]),  # someone else's cordon
        node(unschedulable=False, taints=[OTHER, {"key": "gpufleet.io/gpu-unhealthy", "effect": "NoSchedule"}]),
        node(annotations={"team": "ml"}),
    ],
    ids=["plain", "other-taint", "cordoned-by-someone", "our-taint-by-someone", "other-annotation"],
)
def test_the_rollback_restores_exactly_the_node_before_the_quarantine(before: Dict[str, Any]) -> None:
    quarantined = written(before, plan_quarantine(before, SPEC, NOW))
    release = plan_release(quarantined, SPEC)
    assert release.changed
    restored = written(quarantined, release)
    assert restored["metadata"].pop("resourceVersion") == "44"
    expected = copy.deepcopy(before)
    expected["metadata"].pop("resourceVersion")
    if expected["spec"].get("unschedulable") is False:
        expected["spec"].pop("unschedulable")  # false and absent are the same node
    assert restored == expected
    assert not plan_release(restored, SPEC).changed
    # The rollback's diff ends where the quarantine's began.
    assert release.after == plan_quarantine(before, SPEC, NOW).before


def test_the_rollback_keeps_a_cordon_and_taints_added_during_the_quarantine() -> None:
    quarantined = written(node(), plan_quarantine(node(), SPEC, NOW))
    quarantined["spec"]["taints"].insert(0, CORDON)  # the node lifecycle controller's
    quarantined["spec"]["taints"].append(OTHER)
    release = plan_release(quarantined, SPEC)
    assert release.patch["spec"] == {"taints": [CORDON, OTHER], "unschedulable": None}
    assert release.patch["metadata"] == {"resourceVersion": "43", "annotations": {QUARANTINE_ANNOTATION: None}}
    assert release.after == {"unschedulable": False, "taints": [CORDON, OTHER], "quarantine": None}


def test_the_rollback_never_uncordons_a_node_someone_else_cordoned() -> None:
    before = node(unschedulable=True, taints=[CORDON])
    quarantined = written(before, plan_quarantine(before, SPEC, NOW))
    release = plan_release(quarantined, SPEC)
    assert "unschedulable" not in release.patch["spec"]
    assert release.after["unschedulable"] is True


def test_a_node_without_the_record_is_not_quarantined_and_the_rollback_leaves_it() -> None:
    edit = plan_release(node(unschedulable=True, taints=[OURS]), SPEC)
    assert not edit.changed
    assert edit.after == {"unschedulable": True, "taints": [OURS], "quarantine": None}


def test_a_hand_written_record_is_removed_but_cordon_and_taint_stay() -> None:
    current = node(unschedulable=True, taints=[OURS], annotations={QUARANTINE_ANNOTATION: "by hand"})
    assert read_record(current) == {"raw": "by hand"}
    release = plan_release(current, SPEC)
    assert release.patch == {"metadata": {"resourceVersion": "42", "annotations": {QUARANTINE_ANNOTATION: None}}}


class RecordingWriter:
    """Our NodeWriter.edit interface over a node held in memory: the patch is merged as sent."""

    def __init__(self, current: Dict[str, Any]) -> None:
        self.node = current
        self.calls: List[Dict[str, Any]] = []

    def edit(self, name, plan, check_mode=False, dry_run=False, on_conflict=None) -> NodeResult:
        edit = plan(copy.deepcopy(self.node))
        self.calls.append({"name": name, "dry_run": dry_run, "patch": edit.patch})
        if edit.changed and not dry_run:
            self.node = written(self.node, edit)
        return NodeResult(name, edit.changed, 1, edit.before, edit.after)


def test_the_ladder_through_our_writer_interface_check_mode_is_a_server_dry_run() -> None:
    writer = RecordingWriter(node(taints=[OTHER]))
    ladder = [
        quarantine_node(writer, "gpu-a-003", "present", SPEC, check_mode=True, now=lambda: NOW),
        quarantine_node(writer, "gpu-a-003", "present", SPEC, now=lambda: NOW),
        quarantine_node(writer, "gpu-a-003", "present", SPEC, check_mode=True, now=lambda: LATER),
        quarantine_node(writer, "gpu-a-003", "present", SPEC, now=lambda: LATER),
    ]
    assert [r["changed"] for r in ladder] == [True, True, False, False]
    assert [c["dry_run"] for c in writer.calls] == [True, False, True, False]
    assert ladder[1]["node"] == {"name": "gpu-a-003", "unschedulable": True, "taints": [OTHER, OURS]}
    assert ladder[1]["quarantine"]["since"] == "2026-11-30T03:00:12Z"
    released = quarantine_node(writer, "gpu-a-003", "absent", SPEC)
    assert released["changed"] and released["quarantine"] is None
    assert not quarantine_node(writer, "gpu-a-003", "absent", SPEC)["changed"]


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"name": ""}, "name"),
        ({"state": "gone"}, "state"),
        ({"want": QuarantineSpec(taint_key="")}, "taint_key"),
        ({"want": QuarantineSpec(taint_effect="NoWay")}, "taint_effect"),
    ],
)
def test_bad_input_names_the_option_and_sends_nothing(kwargs: Dict[str, Any], field: str) -> None:
    writer = RecordingWriter(node())
    args = {"name": "gpu-a-003", "state": "present", "want": SPEC, **kwargs}
    with pytest.raises(FieldError) as raised:
        quarantine_node(writer, **args)
    assert raised.value.field == field
    assert writer.calls == []
