# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Classification by the slowest GPU against the pool median, and what is published for a class."""

from __future__ import annotations

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.variability import classes as vc
from ansible_collections.gpufleet.resilience.plugins.module_utils.variability.api import check_measurements


def m(node: str, *gpus: float, pool: str = "gpu-a") -> vc.Measurement:
    return vc.Measurement(node, pool, dict(enumerate(gpus)))


def test_classes_by_slowest_gpu_against_pool_median() -> None:
    result = vc.classify([
        m("gpu-a-001", 1000, 1000, 1000, 1000),  # 0 %
        m("gpu-a-002", 1000, 1000, 1000, 970),  # exactly 3 %: still low (the bound is inclusive)
        m("gpu-a-003", 1000, 1000, 1000, 920),  # 8 %: mid
        m("gpu-a-004", 1000, 1000, 870, 1000),  # 13 %: high
        m("gpu-b-001", 500, 500, 500, 500, pool="gpu-b"),  # a slower pool is its own yardstick
    ])
    by_node = {item.node: item for item in result}
    assert by_node["gpu-a-001"].pool_median == 1000.0
    assert [(n, by_node[n].cls, by_node[n].score) for n in sorted(by_node)] == [
        ("gpu-a-001", "var_low", 0.0), ("gpu-a-002", "var_low", 3.0), ("gpu-a-003", "var_mid", 8.0),
        ("gpu-a-004", "var_high", 13.0), ("gpu-b-001", "var_low", 0.0)]
    assert by_node["gpu-a-004"].slowest_gpu == 2


def test_thresholds_are_parameters_and_checked() -> None:
    result = vc.classify([m("a-1", 100, 100), m("a-2", 100, 99)], {"var_low": 0.5, "var_mid": 0.9})
    assert [item.cls for item in result] == ["var_low", "var_high"]
    with pytest.raises(FieldError) as err:
        vc.check_thresholds({"var_low": 9, "var_mid": 8})
    assert err.value.field == "thresholds.var_low"
    with pytest.raises(FieldError) as err:
        vc.check_thresholds({"var_hi": 9})
    assert err.value.field == "thresholds.var_hi"
    with pytest.raises(FieldError) as err:
        vc.check_weight_offsets({"var_mid": -1})
    assert err.value.field == "weight_offsets.var_mid"


def test_a_node_measured_twice_is_refused() -> None:
    with pytest.raises(FieldError, match="measured twice"):
        vc.classify([m("a-1", 1), m("a-1", 2)])


def test_features_merge_keeps_others_and_replaces_the_old_class() -> None:
    assert vc.merged_features(("ib", "var_mid", "h100"), "var_low") == ("ib", "h100", "var_low")
    assert vc.merged_features(("ib", "var_low"), None) == ("ib",)


def test_slurm_target_adds_the_offset_to_the_recorded_weight() -> None:
    node = {"weight": 5, "features": ["ib"], "active_features": ["ib"]}
    offsets = vc.check_weight_offsets(None)
    target = vc.slurm_target(node, 5, "var_mid", offsets)
    assert target == {"weight": 105, "features": ["ib", "var_mid"], "active_features": ["ib", "var_mid"]}
    # A rerun computes from the recorded weight, not from the 105 now on the node: no drift.
    assert not vc.slurm_differs(dict(target), vc.slurm_target(dict(target), 5, "var_mid", offsets))
    assert vc.slurm_target(dict(target), 5, None, offsets) == node


def test_label_patch_touches_only_the_class_label_and_score() -> None:
    node = {"metadata": {"name": "gpu-a-001", "resourceVersion": "42",
                         "labels": {"gpufleet.io/pool": "gpu-a"}, "annotations": {"x": "y"}}}
    patch = vc.label_patch(node, "var_low", "0.50")
    assert patch == {"metadata": {"labels": {vc.LABEL: "var_low"}, "annotations": {vc.SCORE_ANNOTATION: "0.50"},
                                  "resourceVersion": "42"}}
    node["metadata"]["labels"][vc.LABEL] = "var_low"
    node["metadata"]["annotations"][vc.SCORE_ANNOTATION] = "0.50"
    assert vc.label_patch(node, "var_low", "0.50") == {}
    assert vc.label_patch(node, None, None)["metadata"]["labels"] == {vc.LABEL: None}


@pytest.mark.parametrize(("entry", "field"), [
    ({"node": "gpu-a-001", "format": "nvbandwidth"}, "measurements[0].format"),
    ({"node": "gpu-a-001 gpu-a-002"}, "measurements[0].node"),
    ({"node": "gpu-a-001", "format": "gpu_burn"}, "measurements[0].output"),
    ({"node": "gpu-a-001", "format": "figures", "figures": [1.0, -2.0]}, "measurements[0].figures[1]"),
    ({"node": "gpu-a-001", "colour": "red"}, "measurements[0].colour"),
])
def test_bad_measurements_name_the_field(entry, field) -> None:
    with pytest.raises(FieldError) as err:
        check_measurements([entry], "/tmp/gpus")
    assert err.value.field == field


def test_lab_format_needs_the_lab_dir_and_pool_defaults_from_the_name() -> None:
    with pytest.raises(FieldError) as err:
        check_measurements([{"node": "gpu-a-001"}], None)
    assert err.value.field == "lab_gpu_dir"
    assert check_measurements([{"node": "gpu-b-002"}], "/x")[0]["pool"] == "gpu-b"
