# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The InfiniBand fault family on a lab node's fake sysfs: plan, inject, exact revert, refusals."""

from __future__ import annotations

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos import experiments, ib_fault
from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos.context import FaultContext
from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.infiniband import read_ports
from ansible_collections.gpufleet.resilience.plugins.module_utils.lab import fake_gpu_state

NODE = "gpu-a-001"


@pytest.fixture()
def lab(tmp_path):
    fake_gpu_state.init(str(tmp_path / "gpus" / NODE), 8, NODE, "NVIDIA-H100-80GB-HBM3")
    return tmp_path


def ports(lab):
    return {port.name: port for port in read_ports(fake_gpu_state.ib_root(str(lab / "gpus" / NODE)))}


def spec(lab, experiment, **params):
    return {"experiment": experiment, "node": NODE, "params": params, "lab_dir": str(lab)}


def test_a_port_down_is_injected_and_reverted_exactly(lab):
    ctx = FaultContext(lab_dir=str(lab))
    planned = ib_fault.plan(spec(lab, "ib_port_down", hca="mlx5_1"))
    assert planned["backends"] == ["ib_sim"] and "mlx5_1/1 DOWN/Disabled" in planned["actions"][0]
    undo = ib_fault.inject(spec(lab, "ib_port_down", hca="mlx5_1"), ctx)
    down = ports(lab)["mlx5_1/1"]
    assert (down.state, down.phys_state, down.up, down.counters["link_downed"]) == ("DOWN", "Disabled", False, 1)
    assert ports(lab)["mlx5_0/1"].up
    done = ib_fault.revert(dict(spec(lab, "ib_port_down", hca="mlx5_1"), **undo), ctx)
    assert done["reverted"] and ports(lab)["mlx5_1/1"].up
    # Twice is nothing.
    assert ib_fault.revert(dict(spec(lab, "ib_port_down", hca="mlx5_1"), **undo), ctx)["already"]


def test_a_crash_before_the_undo_brings_the_port_back_up(lab):
    ctx = FaultContext(lab_dir=str(lab))
    ib_fault.inject(spec(lab, "ib_port_down"), ctx)
    assert not ports(lab)["mlx5_0/1"].up
    assert ib_fault.revert(spec(lab, "ib_port_down"), ctx)["reverted"]
    assert ports(lab)["mlx5_0/1"].up


def test_a_flap_counts_and_leaves_the_port_up(lab):
    ctx = FaultContext(lab_dir=str(lab))
    undo = ib_fault.inject(spec(lab, "ib_link_flap", times=3), ctx)
    port = ports(lab)["mlx5_0/1"]
    assert port.up and port.counters["link_downed"] == 3 == undo["link_downed"]
    assert ib_fault.revert(dict(spec(lab, "ib_link_flap"), **undo), ctx)["already"]


@pytest.mark.parametrize("params, field", [
    ({"hca": "mlx5_0; rm -rf /"}, "params.hca"),
    ({"hca": "mlx5_7"}, "params.hca"),
    ({"port": 0}, "params.port"),
    ({"times": 0}, "params.times"),
])
def test_bad_params_are_refused_by_name_and_nothing_changes(lab, params, field):
    experiment = "ib_link_flap" if "times" in params else "ib_port_down"
    before = ports(lab)
    with pytest.raises(FieldError) as caught:
        ib_fault.inject(spec(lab, experiment, **params), FaultContext(lab_dir=str(lab)))
    assert caught.value.field == field
    assert ports(lab) == before


def test_a_real_node_is_refused_naming_the_backend():
    with pytest.raises(FieldError) as caught:
        ib_fault.plan({"experiment": "ib_port_down", "node": NODE, "params": {}})
    assert caught.value.field == "backend" and "not supported" in caught.value.message


def test_the_detection_query_names_the_port():
    expected = experiments.loop_expectations(experiments.get("ib_port_down"), {"hca": "mlx5_1", "port": 1})
    query = expected["detection"]["query"].format(node=NODE, hca="mlx5_1", port=1)
    assert query == 'max(1 - gpufleet_ib_port_up{node="gpu-a-001",hca="mlx5_1",port="1"})'
    assert expected["alerts"] == ["GpuNodeInfiniBandDown"] and not expected["fences"]
