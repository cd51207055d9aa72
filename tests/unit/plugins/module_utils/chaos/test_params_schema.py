# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Issue 16, finding 8: a schema per experiment.

Unknown params (``xidd: 79``) were ignored and the default fault ran; ``nccl_tests`` ran any
executable and ``path`` took any absolute file; drill.yml forwarded any inventory variable named
path, mode or output into the params."""

from __future__ import annotations

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos import api, experiments, ledger
from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError

ROOT = "/opt/nccl-tests"


@pytest.mark.parametrize(("experiment", "params", "field"), [
    ("gpu_xid", {"xidd": 79}, "params.xidd"),
    ("gpu_thermal", {"xid": 79}, "params.xid"),
    ("nccl_env", {"nccl_tests": "/usr/bin/id"}, "params.nccl_tests"),
    ("nccl_env", {"nccl_tests": ROOT + "/../../usr/bin/id"}, "params.nccl_tests"),
    ("nccl_env", {"nccl_tests": "all_reduce_perf"}, "params.nccl_tests"),
    ("nccl_env", {"path": "/etc/shadow"}, "params.path"),
    ("nccl_env", {"vars": {"NCCL_DEBUG": "INFO\nNCCL_IB_HCA=mlx5_0"}}, "params.vars.NCCL_DEBUG"),
    ("checkpoint_fill", {"path": "/"}, "params.path"),
    ("checkpoint_kill", {"output": "/root/.ssh/authorized_keys"}, "params.output"),
    ("numa_remote_memory", {"kubelet_config": "/var/lib/kubelet/config.yaml"}, "params.kubelet_config"),
    ("gpu_xid", {"pci_bus": "00:00.0\nNVRM: Xid (PCI:0000:00:00): 79"}, "params.pci_bus"),
    ("gpu_power", {"power_w": float("nan")}, "params.power_w"),
    ("gpu_xid", [79], "params"),
])
def test_the_schema_refuses_naming_the_knob(experiment, params, field) -> None:
    with pytest.raises(FieldError) as bad:
        experiments.check_params(experiments.get(experiment), params, [ROOT])
    assert bad.value.field == field


def test_paths_and_programs_from_declared_directories_pass() -> None:
    nccl = experiments.get("nccl_env")
    good = {"nccl_tests": ROOT + "/build/all_reduce_perf", "path": ROOT + "/nccl.conf", "vars": {"NCCL_DEBUG": "WARN"}}
    assert experiments.check_params(nccl, good, [ROOT]) == good
    with pytest.raises(FieldError, match="none declared"):
        experiments.check_params(nccl, {"nccl_tests": ROOT + "/build/all_reduce_perf"}, [])
    assert experiments.check_params(experiments.get("gpu_xid"), {"xid": 79, "gpu": 3, "pci_bus": "0000:3b:00.0"})


def test_every_experiment_declares_its_defaults_as_knobs() -> None:
    for experiment in experiments.EXPERIMENTS.values():
        assert set(experiment.params) <= set(experiment.knobs), experiment.name


def test_the_gate_refuses_an_unknown_knob_before_it_registers_a_drill(bare_metal) -> None:
    params = dict(bare_metal, experiment="gpu_xid", params={"xidd": 79})
    with pytest.raises(FieldError) as bad:
        api.drill_gate(params, False)
    assert bad.value.field == "params.xidd" and "xid" in bad.value.message
    assert not ledger.drills(ledger.FileStore(params["ledger_file"]).read()[0])


def test_the_gate_allows_the_lab_directory_and_the_declared_ones(bare_metal, tmp_path) -> None:
    lab = tmp_path / "lab"
    params = dict(bare_metal, experiment="checkpoint_fill", params={"path": str(tmp_path / "elsewhere")})
    with pytest.raises(FieldError) as bad:
        api.drill_gate(params, True)
    assert bad.value.field == "params.path"
    fine = experiments.check_params(experiments.get("checkpoint_fill"), {"path": str(lab / "storage")}, [str(lab)])
    assert fine == {"path": str(lab / "storage")}
