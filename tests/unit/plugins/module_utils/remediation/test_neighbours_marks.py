"""The marks of other remediators on a Node (as the API server serialises it)."""

from __future__ import annotations

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation.neighbours import (
    KNOWN,
    Marker,
    found_on,
    parse,
)


def node(labels=None, annotations=None, taints=None, conditions=None):
    return {"metadata": {"name": "gpu-a-001", "labels": labels or {}, "annotations": annotations or {}},
            "spec": {"taints": taints or []},
            "status": {"conditions": conditions or [{"type": "Ready", "status": "True"}]}}


def test_a_plain_node_has_no_neighbour():
    assert found_on(node(labels={"gpufleet.io/pool": "gpu-a"}), KNOWN) == []


def test_the_known_remediators_marks():
    assert found_on(node(labels={"dgxc.nvidia.com/nvsentinel-state": "draining"}), KNOWN) == [
        "NVSentinel: label dgxc.nvidia.com/nvsentinel-state=draining"]
    assert found_on(node(annotations={"quarantineHealthEvent": "{...}"}), KNOWN) == [
        "NVSentinel: annotation quarantineHealthEvent={...}"]
    draino = {"type": "DrainScheduled", "status": "True"}
    assert found_on(node(conditions=[draino]), KNOWN) == ["draino: condition DrainScheduled=True"]
    # A condition counts only while it is True.
    assert found_on(node(conditions=[dict(draino, status="False")]), KNOWN) == []


def test_a_value_narrows_the_mark():
    markers = parse([{"owner": "site", "label": "repair.example.com/state", "value": "active"}])
    assert found_on(node(labels={"repair.example.com/state": "done"}), markers) == []
    assert found_on(node(labels={"repair.example.com/state": "active"}), markers) == [
        "site: label repair.example.com/state=active"]


def test_a_taint_by_key_whatever_its_value():
    markers = parse([{"owner": "site", "taint": "example.com/repairing"}])
    tainted = node(taints=[{"key": "example.com/repairing", "effect": "NoSchedule"}])
    assert found_on(tainted, markers) == ["site: taint example.com/repairing="]


def test_none_is_the_known_list_and_an_empty_list_acts_beside_anyone():
    assert parse(None) == KNOWN
    assert parse([]) == ()
    assert found_on(node(labels={"dgxc.nvidia.com/nvsentinel-state": "quarantined"}), parse([])) == []
    assert parse([{"owner": "o", "annotation": "a.example.com/x"}]) == (Marker("o", "annotation", "a.example.com/x"),)


@pytest.mark.parametrize("raw, field, words", [
    ("nvsentinel", "neighbours", "must be a list"),
    (["x"], "neighbours[0]", "must be a mapping"),
    ([{"owner": "x"}], "neighbours[0]", "must have exactly one of label, taint, annotation, condition"),
    ([{"owner": "x", "label": "a", "taint": "b"}], "neighbours[0]", "exactly one"),
    ([{"owner": "x", "label": "a", "colour": "red"}], "neighbours[0].colour", "is not a marker field"),
    ([{"label": "a"}], "neighbours[0].owner", ""),
    ([{"owner": "x", "label": "a\nb"}], "neighbours[0].label", ""),
])
def test_a_bad_mark_names_its_field(raw, field, words):
    with pytest.raises(FieldError) as error:
        parse(raw)
    assert error.value.field == field and words in str(error.value)
