# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The one pool model: every rule, its field-naming errors, the layout, and the specs that mirror it."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError, GpufleetError
from ansible_collections.gpufleet.resilience.plugins.module_utils.fleet.pools import (
    POOL_FIELDS,
    expand_pools,
    merge_pools,
    node_as_dict,
    parse_pools,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.lab.node_layout import kwok_node_manifest

REPO = Path(__file__).resolve().parents[5]

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


def expand(raw: Any, variable: str = "gpufleet_node_pools"):
    return expand_pools(parse_pools(raw, variable))


def test_lab_pool_places_nodes_in_racks_and_blocks() -> None:
    placement = [(n.name, n.rack, n.block, n.spare) for n in expand([LAB_POOL])]
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


def test_missing_optional_fields_take_the_defaults() -> None:
    (pool,) = parse_pools([{"name": "gpu-b", "count": 1}])
    assert pool.as_dict() == {
        "name": "gpu-b",
        "count": 1,
        "spares": 0,
        "gpus_per_node": 8,
        "gpu_product": "NVIDIA-H100-80GB-HBM3",
        "zone": "lab-zone-a",
        "nodes_per_rack": 4,
        "racks_per_block": 2,
        "cpus": 16,
        "memory_mb": 65536,
        "selector": {},
        "labels": {},
        "taints": [],
        "tolerations": [],
    }


def test_strings_from_extra_vars_become_numbers() -> None:
    (pool,) = parse_pools([{"name": "gpu-b", "count": "4", "spares": "1", "gpus_per_node": "4"}])
    assert (pool.count, pool.spares, pool.gpus_per_node) == (4, 1, 4)


def test_a_real_pool_keeps_its_selector_labels_taints_and_tolerations() -> None:
    (pool,) = parse_pools(
        [
            {
                "name": "h100",
                "count": 2,
                "selector": {"eks.amazonaws.com/nodegroup": "h100-a", "nvidia.com/gpu.count": 8},
                "labels": {"gpufleet.io/tier": "training"},
                "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
                "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}],
            }
        ],
        require_selector=True,
    )
    assert pool.selector_string == "eks.amazonaws.com/nodegroup=h100-a,nvidia.com/gpu.count=8"
    assert pool.node_labels == {"gpufleet.io/tier": "training", "gpufleet.io/pool": "h100"}
    assert pool.as_dict()["taints"] == [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    assert pool.tolerations[0]["key"] == "dedicated"


F = "gpufleet_node_pools[0]"


@pytest.mark.parametrize(
    ("pool", "field", "message"),
    [
        ({"name": "GPU_A", "count": 1}, F + ".name", "must be lowercase letters"),
        ({"name": "a" * 41, "count": 1}, F + ".name", "at most 40 characters"),
        ({"name": "-gpu", "count": 1}, F + ".name", "must be lowercase"),
        ({"name": "gpu-a"}, F + ".count", "is required"),
        ({"count": 1}, F + ".name", "is required"),
        ({"name": "gpu-a", "count": 0}, F + ".count", "must be >= 1, got 0"),
        ({"name": "gpu-a", "count": "many"}, F + ".count", "must be an integer, got 'many'"),
        ({"name": "gpu-a", "count": True}, F + ".count", "must be an integer"),
        ({"name": "gpu-a", "count": 1.5}, F + ".count", "must be an integer"),
        ({"name": "gpu-a", "count": 1, "spares": -1}, F + ".spares", "must be >= 0"),
        ({"name": "gpu-a", "count": 1, "gpus_per_node": 0}, F + ".gpus_per_node", "must be >= 1, got 0"),
        ({"name": "gpu-a", "count": 1, "gpus_per_node": 65}, F + ".gpus_per_node", "must be <= 64"),
        ({"name": "gpu-a", "count": 1, "memory_mb": 2**40}, F + ".memory_mb", "must be <= "),
        ({"name": "gpu-a", "count": 1, "nodes_per_rack": 0}, F + ".nodes_per_rack", "must be >= 1"),
        ({"name": "gpu-a", "count": 990, "spares": 10}, F + ".spares", "count + spares must be <= 999, got 1000"),
        ({"name": "gpu-a", "count": 1, "zone": "zone a"}, F + ".zone", "not a valid Kubernetes label value"),
        ({"name": "gpu-a", "count": 1, "gpu_product": "x" * 64}, F + ".gpu_product", "not a valid"),
        ({"name": "gpu-a", "count": 1, "colour": "red"}, F + ".colour", "unknown pool field"),
        ({"name": "gpu-a", "count": 1, "selector": "a=b"}, F + ".selector", "must be a dict"),
        ({"name": "gpu-a", "count": 1, "selector": {"bad key!": "x"}}, F + ".selector['bad key!']", "label key"),
        ({"name": "gpu-a", "count": 1, "labels": {"tier": "a b"}}, F + ".labels['tier']", "label value"),
        (
            {"name": "gpu-a", "count": 1, "labels": {"gpufleet.io/pool": "other"}},
            F + ".labels['gpufleet.io/pool']",
            "leave it out",
        ),
        ({"name": "gpu-a", "count": 1, "taints": {"key": "a"}}, F + ".taints", "must be a list"),
        (
            {"name": "gpu-a", "count": 1, "taints": [{"key": "a", "effect": "Sometimes"}]},
            F + ".taints[0].effect",
            "must be one of NoSchedule",
        ),
        (
            {"name": "gpu-a", "count": 1, "taints": [{"key": "gpufleet.io/gpu-unhealthy", "effect": "NoSchedule"}]},
            F + ".taints[0].key",
            "set by cordon or by remediation",
        ),
        (
            {
                "name": "gpu-a",
                "count": 1,
                "taints": [{"key": "a", "effect": "NoSchedule"}, {"key": "a", "effect": "NoSchedule"}],
            },
            F + ".taints[1]",
            "given twice",
        ),
        (
            {"name": "gpu-a", "count": 1, "tolerations": [{"operator": "Exists"}]},
            F + ".tolerations[0].key",
            "tolerates every taint",
        ),
        (
            {
                "name": "gpu-a",
                "count": 1,
                "tolerations": [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}],
            },
            F + ".tolerations[0].key",
            "slurmd pods must not tolerate it",
        ),
        (
            {"name": "gpu-a", "count": 1, "tolerations": [{"key": "a", "operator": "Maybe"}]},
            F + ".tolerations[0].operator",
            "must be Equal or Exists",
        ),
        (["gpu-a"], F, "must be a dict"),
    ],
)
def test_bad_pools_name_the_field(pool: Any, field: str, message: str) -> None:
    with pytest.raises(FieldError) as raised:
        parse_pools([pool])
    assert raised.value.field == field
    assert message in raised.value.message
    assert str(raised.value).startswith(field + ": ")
    assert isinstance(raised.value, GpufleetError)


def test_duplicate_names_and_non_lists_are_refused() -> None:
    with pytest.raises(FieldError, match=r"^gpufleet_node_pools\[1\]\.name: 'a' is also the name of .*\[0\]"):
        parse_pools([{"name": "a", "count": 1}, {"name": "a", "count": 2}])
    with pytest.raises(FieldError, match=r"^gpufleet_node_pools: must be a list, got dict"):
        parse_pools({"name": "gpu-a"})


def test_a_real_cluster_needs_a_selector_and_the_error_names_the_variable() -> None:
    with pytest.raises(FieldError) as raised:
        parse_pools(
            [{"name": "ok", "count": 1, "selector": {"a": "b"}}, {"name": "h100", "count": 1}],
            "slurm_node_pools",
            require_selector=True,
        )
    assert raised.value.field == "slurm_node_pools[1].selector"
    assert "required on a real cluster" in raised.value.message


def test_merge_keeps_the_inventory_pool_on_a_clash_and_normalizes() -> None:
    merged = merge_pools(
        [{"name": "gpu-a", "count": 8}], [{"name": "gpu-a", "count": 2}, {"name": "gpu-b", "count": "2"}]
    )
    assert [(p.name, p.count) for p in merged] == [("gpu-a", 8), ("gpu-b", 2)]
    assert merged[1].spares == 0
    with pytest.raises(FieldError, match=r"^recorded node pools\[0\]\.count"):
        merge_pools([], [{"name": "gpu-b", "count": -1}])


def test_kwok_manifest_carries_gpus_topology_pool_labels_taints_and_the_kwok_annotation() -> None:
    pool = dict(
        LAB_POOL,
        labels={"gpufleet.io/tier": "training"},
        taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
    )
    node = node_as_dict(expand([pool])[4])
    manifest = kwok_node_manifest(node, max_pods=110)
    assert manifest["metadata"]["name"] == "gpu-a-005"
    assert manifest["metadata"]["annotations"] == {"kwok.x-k8s.io/node": "fake"}
    labels = manifest["metadata"]["labels"]
    assert labels["type"] == "kwok"
    assert labels["gpufleet.io/tier"] == "training"
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
    assert manifest["spec"] == {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]}


def test_a_lab_pool_without_taints_gets_no_taints() -> None:
    assert "spec" not in kwok_node_manifest(node_as_dict(expand([LAB_POOL])[0]))


@given(
    count=st.integers(min_value=1, max_value=300),
    spares=st.integers(min_value=0, max_value=50),
    per_rack=st.integers(min_value=1, max_value=40),
    per_block=st.integers(min_value=1, max_value=10),
)
def test_racks_fill_in_order_and_never_overflow(count: int, spares: int, per_rack: int, per_block: int) -> None:
    pool = {"name": "p", "count": count, "spares": spares, "nodes_per_rack": per_rack, "racks_per_block": per_block}
    nodes = expand([pool])
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


def _pool_spec(role: str, entry: str, option: str) -> Dict[str, Any]:
    specs = yaml.safe_load((REPO / "roles" / role / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    return specs[entry]["options"][option]["options"]


@pytest.mark.parametrize(("role", "option"), [("node_pool", "node_pool_pools"), ("slurm", "slurm_node_pools")])
@pytest.mark.parametrize("entry", ["main", "validate"])
def test_role_specs_describe_exactly_the_pool_model(role: str, option: str, entry: str) -> None:
    spec = _pool_spec(role, entry, option)
    assert list(spec) == list(POOL_FIELDS)
    for key, default in POOL_FIELDS.items():
        if default is None:
            assert spec[key].get("required") is True, key
        else:
            assert spec[key].get("default") == default, key
    assert spec == _pool_spec("node_pool", "main", "node_pool_pools")
