# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The lab's simulated figures, on a real fake GPU state directory; and the Slurm write's argv."""

from __future__ import annotations

import os

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.lab import fake_gpu_state as fgs
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.client import SlurmClient
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.runner import SlurmRunner
from ansible_collections.gpufleet.resilience.plugins.module_utils.variability.lab_figures import (
    UnmeasurableNode,
    lab_figures,
)

PRODUCT = "NVIDIA-H100-80GB-HBM3"


def test_simulated_figures_are_deterministic_and_written_only_where_absent(tmp_path) -> None:
    node_dir = tmp_path / "gpu-a-002"
    fgs.init(str(node_dir), 8, "gpu-a-002", PRODUCT)
    first = lab_figures(str(tmp_path), "gpu-a-002")
    assert first == {gpu: float(fgs.simulated_perf_permille("gpu-a-002", gpu)) for gpu in range(8)}
    # The lab's gpu-a-002 has one GPU about 13 % slow: the spread the classes need to show.
    assert min(first.values()) < 900 < max(first.values())
    # A figure set by hand is kept by init and by the fill.
    fgs.set_fields(str(node_dir), 3, perf_permille=700)
    assert not fgs.init(str(node_dir), 8, "gpu-a-002", PRODUCT)
    assert lab_figures(str(tmp_path), "gpu-a-002")[3] == 700.0
    # clear() keeps it: it is a capability, not health.
    fgs.clear(str(node_dir))
    assert lab_figures(str(tmp_path), "gpu-a-002")[3] == 700.0


def test_a_state_without_the_key_gets_it_on_fill(tmp_path) -> None:
    node_dir = tmp_path / "gpu-a-001"
    fgs.init(str(node_dir), 2, "gpu-a-001", PRODUCT)
    path = node_dir / "gpu0.state"
    path.write_text("".join(line for line in path.read_text().splitlines(True) if not line.startswith("perf_")))
    # Check mode reads the would-be figure and writes nothing.
    assert lab_figures(str(tmp_path), "gpu-a-001", write=False)[0] == fgs.simulated_perf_permille("gpu-a-001", 0)
    assert "perf_permille" not in path.read_text()
    lab_figures(str(tmp_path), "gpu-a-001")
    assert "perf_permille=%d" % fgs.simulated_perf_permille("gpu-a-001", 0) in path.read_text()


def test_lost_gpu_and_missing_node_are_unmeasurable(tmp_path) -> None:
    fgs.init(str(tmp_path / "gpu-a-001"), 2, "gpu-a-001", PRODUCT)
    fgs.set_lost(str(tmp_path / "gpu-a-001"), 1)
    with pytest.raises(UnmeasurableNode, match=r"GPU\(s\) 1 fallen off the bus"):
        lab_figures(str(tmp_path), "gpu-a-001")
    with pytest.raises(UnmeasurableNode):
        lab_figures(str(tmp_path), "gpu-a-009")
    assert not os.path.exists(tmp_path / "gpu-a-009" / "gpu0.state")


def test_set_node_placement_argv_and_checks() -> None:
    client = SlurmClient(SlurmRunner(check_mode=True, slurm_conf="/etc/slurm/slurm.conf"))
    result = client.set_node_placement("gpu-a-001", 101, ["ib", "var_mid"], ["ib", "var_mid"])
    assert not result.ran
    assert result.argv == ["scontrol", "update", "NodeName=gpu-a-001", "Weight=101",
                           "AvailableFeatures=ib,var_mid", "ActiveFeatures=ib,var_mid"]
    # Clearing the features is an empty list, one word each.
    assert client.set_node_placement("gpu-a-001", 1, [], []).argv[-2:] == ["AvailableFeatures=", "ActiveFeatures="]
    for kwargs, field in (({"weight": True}, "weight"), ({"features": ["a b"]}, "features"),
                          ({"active_features": ["x"]}, "active_features")):
        args = dict({"node": "gpu-a-001", "weight": 1, "features": ["ib"], "active_features": ["ib"]}, **kwargs)
        with pytest.raises(FieldError) as err:
            client.set_node_placement(**args)
        assert err.value.field == field
