# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The InfiniBand fault family on a lab node's fake sysfs: plan, inject, exact revert, refusals."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos import experiments, ib_fault
from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos.context import FaultContext
from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError, GpufleetError
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.infiniband import read_ports
from ansible_collections.gpufleet.resilience.plugins.module_utils.lab import fake_gpu_state, fake_ib

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


@pytest.fixture()
def real_node(tmp_path, monkeypatch):
    """A real node as the ibportstate backend sees it, from our own seams: its sysfs (a tree made by the
    lab's fake_ib), its opt-in file and a command runner that records each argv and acts on the tree as
    ibportstate would on the port."""
    fake_ib.create_tree(str(tmp_path / "sys"), ["mlx5_0", "mlx5_1"])
    fake_ib.create_tree(str(tmp_path / "sys"), {"mlx5_2": 1}, link_layer="Ethernet")
    opt_in = tmp_path / "chaos-ib-hcas"
    opt_in.write_text("# HCAs a drill may take down\nmlx5_1\nmlx5_2  # the RoCE one\n")
    commands = []

    def run(argv):
        commands.append(list(argv))
        hca, port, op = argv[2], int(argv[4]), argv[-1]
        fake_ib.set_port(str(tmp_path / "sys"), hca, port, *(("DOWN", "Disabled") if op == "disable" else
                                                             ("ACTIVE", "LinkUp")))
        return ""

    monkeypatch.setattr(ib_fault, "SYSFS_ROOT", str(tmp_path))
    monkeypatch.setattr(ib_fault, "OPT_IN_FILE", str(opt_in))
    monkeypatch.setattr(ib_fault, "FLAP_PAUSE_S", 0)
    monkeypatch.setattr(ib_fault, "run_command", run)
    monkeypatch.setattr(ib_fault.shutil, "which", lambda name: "/usr/sbin/" + name)
    return SimpleNamespace(commands=commands, ports=lambda: {p.name: p for p in read_ports(str(tmp_path / "sys"))})


def real(experiment, **params):
    return {"experiment": experiment, "node": NODE, "params": params}


def test_a_real_port_is_taken_down_with_ibportstate_and_enabled_again(real_node):
    planned = ib_fault.plan(real("ib_port_down", hca="mlx5_1"))
    assert planned["backends"] == ["ibportstate"] and not planned["simulated"]
    assert "ibportstate -C mlx5_1 -P 1 -D 0 1 disable" in planned["actions"][0]
    undo = ib_fault.inject(real("ib_port_down", hca="mlx5_1"), FaultContext())
    assert real_node.commands == [["ibportstate", "-C", "mlx5_1", "-P", "1", "-D", "0", "1", "disable"]]
    assert not real_node.ports()["mlx5_1/1"].up and real_node.ports()["mlx5_0/1"].up
    done = ib_fault.revert(dict(real("ib_port_down", hca="mlx5_1"), **undo), FaultContext())
    assert real_node.commands[-1][-1] == "enable" and done["reverted"] and real_node.ports()["mlx5_1/1"].up
    # Twice is nothing; after a crash before the undo (the spec alone), a disabled port is enabled.
    assert ib_fault.revert(dict(real("ib_port_down", hca="mlx5_1"), **undo), FaultContext())["already"]
    ib_fault.inject(real("ib_port_down", hca="mlx5_1"), FaultContext())
    assert ib_fault.revert(real("ib_port_down", hca="mlx5_1"), FaultContext())["reverted"]
    assert real_node.ports()["mlx5_1/1"].up


def test_a_real_flap_disables_and_enables_times_over(real_node):
    undo = ib_fault.inject(real("ib_link_flap", hca="mlx5_1", times=2), FaultContext())
    assert [argv[-1] for argv in real_node.commands] == ["disable", "enable", "disable", "enable"]
    assert real_node.ports()["mlx5_1/1"].up and undo["link_downed"] == 2
    with pytest.raises(FieldError) as caught:
        ib_fault.inject(real("ib_link_flap", hca="mlx5_1", times=50), FaultContext())
    assert caught.value.field == "params.times"


@pytest.mark.parametrize("hca, why", [
    ("mlx5_0", "has not opted in to InfiniBand drills on this node"),
    ("mlx5_2", "is a Ethernet (RoCE) port"),
])
def test_a_real_port_not_opted_in_or_roce_is_refused_and_left_alone(real_node, hca, why):
    with pytest.raises(FieldError) as caught:
        ib_fault.inject(real("ib_port_down", hca=hca), FaultContext())
    assert caught.value.field == "params.hca" and why in caught.value.message
    assert real_node.commands == [] and real_node.ports()["%s/1" % hca].up


def test_a_node_without_ibportstate_is_refused_before_anything(real_node, monkeypatch):
    monkeypatch.setattr(ib_fault.shutil, "which", lambda name: None)
    with pytest.raises(GpufleetError, match="ibportstate is not on this node's PATH"):
        ib_fault.inject(real("ib_port_down", hca="mlx5_1"), FaultContext())
    assert real_node.commands == [] and real_node.ports()["mlx5_1/1"].up


def test_check_mode_on_a_real_node_checks_and_runs_nothing(real_node):
    ib_fault.inject(real("ib_port_down", hca="mlx5_1"), FaultContext(check_mode=True))
    assert real_node.commands == []
    with pytest.raises(FieldError):
        ib_fault.inject(real("ib_port_down", hca="mlx5_0"), FaultContext(check_mode=True))


def test_each_backend_stays_on_its_side():
    with pytest.raises(FieldError) as caught:
        ib_fault.plan(dict(real("ib_port_down"), backend="ib_sim"))
    assert caught.value.field == "backend" and "ibportstate" in caught.value.message
    with pytest.raises(FieldError) as caught:
        ib_fault.plan({"experiment": "ib_port_down", "node": NODE, "params": {}, "lab_dir": "/var/tmp/lab",
                       "backend": "ibportstate"})
    assert caught.value.field == "backend"


def test_the_detection_query_names_the_port():
    expected = experiments.loop_expectations(experiments.get("ib_port_down"), {"hca": "mlx5_1", "port": 1})
    query = expected["detection"]["query"].format(node=NODE, hca="mlx5_1", port=1)
    assert query == 'max(1 - gpufleet_ib_port_up{node="gpu-a-001",hca="mlx5_1",port="1"})'
    assert expected["alerts"] == ["GpuNodeInfiniBandDown"] and not expected["fences"]
