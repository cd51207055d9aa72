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
    assert sorted(result) == ["authorized_keys", "operator", "slurm"]
    assert result["operator"] == {"propagatedNodeConditions": ["GpuHealthy"]}
    assert result["slurm"]["nodesets"]["gpu-a"]["replicas"] == 2
    assert result["authorized_keys"] == {"alice": KEY + "\n"}
    assert isinstance(result, dict) and not hasattr(result, "_asdict")


def test_filter_uses_the_configmap_name_given() -> None:
    result = slinky_values([{"name": "gpu-a", "count": 1}], USERS, STORAGE, keys_configmap="fleet-keys")
    volumes = result["slurm"]["loginsets"]["login"]["podSpec"]["volumes"]
    assert {"name": "gpufleet-authorized-keys", "configMap": {"name": "fleet-keys", "defaultMode": 0o444}} in volumes


def test_filter_errors_name_the_role_variable() -> None:
    with pytest.raises(AnsibleFilterError, match=r"^slurm_node_pools\[1\]\.name: duplicate pool name 'gpu-a'"):
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
