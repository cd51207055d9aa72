# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
from __future__ import annotations

from typing import Any, Dict

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.gpufleet.resilience.plugins.module_utils.lab.node_layout import (
    NodeLayoutError,
    expand_pools,
    kwok_node_manifest,
    node_as_dict,
)

LAB_POOL: Dict[str, Any] = {
    "name": "gpu-a",
    "count": 8,
    "spares": 2,
    "gpus_per_node": 8,
    "gpu_product": "NVIDIA-H100-80GB-HBM3",
    "zone": "lab-zone-a",
    "nodes_per_rack": 4,
    "racks_per_block": 2,
    "cpus": 16,
    "memory_mb": 65536,
}


def test_lab_pool_places_nodes_in_racks_and_blocks() -> None:
    nodes = expand_pools([LAB_POOL])
    placement = [(n.name, n.rack, n.block, n.spare) for n in nodes]
    assert placement == [
        ("gpu-a-001", "gpu-a-rack-1", "gpu-a-block-1", False),
        ("gpu-a-002", "gpu-a-rack-1", "gpu-a-block-1", False),
        ("gpu-a-003", "gpu-a-rack-1", "gpu-a-block-1", False),
        ("gpu-a-004", "gpu-a-rack-1", "gpu-a-block-1", False),
        ("gpu-a-005", "gpu-a-rack-2", "gpu-a-block-1", False),
        ("gpu-a-006", "gpu-a-rack-2", "gpu-a-block-1", False),
        ("gpu-a-007", "gpu-a-rack-2", "gpu-a-block-1", False),
        ("gpu-a-008", "gpu-a-rack-2", "gpu-a-block-1", False),
        # Spares continue the numbering and the topology.
        ("gpu-a-009", "gpu-a-rack-3", "gpu-a-block-2", True),
        ("gpu-a-010", "gpu-a-rack-3", "gpu-a-block-2", True),
    ]


def test_missing_optional_fields_take_the_lab_defaults() -> None:
    (node,) = expand_pools([{"name": "gpu-b", "count": 1}])
    assert (node.gpus, node.gpu_product, node.zone, node.cpus, node.memory_mb) == (
        8,
        "NVIDIA-H100-80GB-HBM3",
        "lab-zone-a",
        16,
        65536,
    )


@pytest.mark.parametrize(
    ("pools", "message"),
    [
        ([{"name": "GPU_A", "count": 1}], "gpufleet_node_pools[0].name 'GPU_A' must be lowercase"),
        ([{"name": "gpu-a"}], "gpufleet_node_pools[0].count is required"),
        ([{"name": "gpu-a", "count": -1}], "gpufleet_node_pools[0].count must be >= 0, got -1"),
        ([{"name": "gpu-a", "count": "many"}], "gpufleet_node_pools[0].count must be an integer, got 'many'"),
        ([{"name": "gpu-a", "count": True}], "gpufleet_node_pools[0].count must be an integer"),
        ([{"name": "gpu-a", "count": 1, "nodes_per_rack": 0}], "gpufleet_node_pools[0].nodes_per_rack must be >= 1"),
        ([{"name": "gpu-a", "count": 990, "spares": 10}], "count + spares must be <= 999, got 1000"),
        ([{"name": "gpu-a", "count": 1, "zone": "zone a"}], "gpufleet_node_pools[0].zone 'zone a' is not a valid"),
        ([{"name": "a", "count": 1}, {"name": "a", "count": 2}], "gpufleet_node_pools[1].name 'a' is used by another"),
        ([["gpu-a"]], "gpufleet_node_pools[0] must be a dict"),
        ({"name": "gpu-a"}, "gpufleet_node_pools must be a list of pools, got dict"),
    ],
)
def test_bad_pools_name_the_field(pools: Any, message: str) -> None:
    with pytest.raises(NodeLayoutError) as raised:
        expand_pools(pools)
    assert message in str(raised.value)


def test_error_names_the_variable_it_came_from() -> None:
    with pytest.raises(NodeLayoutError, match=r"^node_pool_name/node_pool_\*\[0\]\.count"):
        expand_pools([{"name": "gpu-c", "count": -2}], "node_pool_name/node_pool_*")


def test_kwok_manifest_carries_gpus_topology_and_the_kwok_annotation() -> None:
    node = node_as_dict(expand_pools([LAB_POOL])[4])
    manifest = kwok_node_manifest(node, max_pods=110)
    assert manifest["metadata"]["name"] == "gpu-a-005"
    assert manifest["metadata"]["annotations"] == {"kwok.x-k8s.io/node": "fake"}
    labels = manifest["metadata"]["labels"]
    assert labels["type"] == "kwok"
    assert labels["nvidia.com/gpu.count"] == "8"
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert labels["topology.kubernetes.io/zone"] == "lab-zone-a"
    assert (labels["gpufleet.io/pool"], labels["gpufleet.io/rack"], labels["gpufleet.io/block"]) == (
        "gpu-a",
        "gpu-a-rack-2",
        "gpu-a-block-1",
    )
    want = {"cpu": "16", "memory": "65536Mi", "pods": "110", "nvidia.com/gpu": "8"}
    assert manifest["status"] == {"capacity": want, "allocatable": want}
    assert "spec" not in manifest  # no taint: lab workloads need no kwok toleration


@given(
    count=st.integers(min_value=0, max_value=300),
    spares=st.integers(min_value=0, max_value=50),
    per_rack=st.integers(min_value=1, max_value=40),
    per_block=st.integers(min_value=1, max_value=10),
)
def test_racks_fill_in_order_and_never_overflow(count: int, spares: int, per_rack: int, per_block: int) -> None:
    pool = {"name": "p", "count": count, "spares": spares, "nodes_per_rack": per_rack, "racks_per_block": per_block}
    nodes = expand_pools([pool])
    assert len(nodes) == count + spares
    assert [n.spare for n in nodes] == [False] * count + [True] * spares
    racks: Dict[str, int] = {}
    blocks: Dict[str, set] = {}
    for node in nodes:
        racks[node.rack] = racks.get(node.rack, 0) + 1
        blocks.setdefault(node.block, set()).add(node.rack)
    assert all(size <= per_rack for size in racks.values())
    assert all(len(members) <= per_block for members in blocks.values())
    assert len({n.name for n in nodes}) == len(nodes)
