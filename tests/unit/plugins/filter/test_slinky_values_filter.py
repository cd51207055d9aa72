# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.resilience.plugins.filter.slinky_values import FilterModule

slinky_values = FilterModule().filters()["slinky_values"]

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHEVTZoDIeCxaPalMEegyC6PltJjxVgBVQXWyfiIIk39 alice@lab"
USERS = [{"name": "alice", "ssh_authorized_keys": [KEY]}]
STORAGE = {"home_claim": "slurm-home", "checkpoints_claim": "slurm-checkpoints"}


def test_filter_returns_both_charts_and_the_keys_as_plain_dicts() -> None:
    result = slinky_values(
        [{"name": "gpu-a", "count": 2}], USERS, STORAGE, {"propagated_node_conditions": ["GpuHealthy"]}
    )
    assert sorted(result) == ["authorized_keys", "chart", "operator", "slurm"]
    assert result["operator"]["propagatedNodeConditions"] == ["GpuHealthy"]
    assert result["slurm"]["nodesets"]["gpu-a"]["replicas"] == 2
    assert result["authorized_keys"] == {"alice": KEY + "\n"}
    assert result["chart"] == {
        "version": "1.2.1",
        "line": "1.2",
        "slurm_version": "26.05",
        "minimum_slurm_version": "25.11",
    }
    assert isinstance(result, dict) and not hasattr(result, "_asdict")


def test_filter_makes_values_for_the_chart_version_given() -> None:
    result = slinky_values([{"name": "gpu-a", "count": 2}], USERS, STORAGE, chart_version="1.1.2")
    assert result["chart"]["slurm_version"] == "25.11"
    assert result["slurm"]["nodesets"]["gpu-a"]["slurmd"]["image"]["tag"] == "25.11-ubuntu24.04"
    assert "propagatedNodeConditions" not in result["operator"]
    with pytest.raises(AnsibleFilterError, match=r"^slurm_slinky_version: Slinky chart 0\.9\.0 is not supported"):
        slinky_values(
            [{"name": "gpu-a", "count": 2}],
            USERS,
            STORAGE,
            chart_version="0.9.0",
            variables={"chart_version": "slurm_slinky_version"},
        )


def test_filter_uses_the_configmap_name_given() -> None:
    result = slinky_values([{"name": "gpu-a", "count": 1}], USERS, STORAGE, keys_configmap="fleet-keys")
    volumes = result["slurm"]["loginsets"]["login"]["podSpec"]["volumes"]
    assert {"name": "gpufleet-authorized-keys", "configMap": {"name": "fleet-keys", "defaultMode": 0o444}} in volumes


def test_filter_errors_name_the_role_variable() -> None:
    duplicate = r"^slurm_node_pools\[1\]\.name: 'gpu-a' is also the name of slurm_node_pools\[0\]"
    with pytest.raises(AnsibleFilterError, match=duplicate):
        slinky_values(
            [{"name": "gpu-a", "count": 1}, {"name": "gpu-a", "count": 1}],
            USERS,
            STORAGE,
            variables={"pools": "slurm_node_pools"},
        )
    with pytest.raises(AnsibleFilterError, match=r"^slurm_slinky_checkpoints_path: "):
        slinky_values(
            [{"name": "gpu-a", "count": 1}],
            USERS,
            dict(STORAGE, checkpoints_path="/home"),
            variables={"storage": "slurm_slinky_"},
        )
