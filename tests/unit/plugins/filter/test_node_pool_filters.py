# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.resilience.plugins.filter.kwok_node_manifests import FilterModule as ManifestFilters
from ansible_collections.gpufleet.resilience.plugins.filter.node_pool_layout import FilterModule as LayoutFilters
from ansible_collections.gpufleet.resilience.plugins.filter.node_pools import FilterModule as PoolFilters

node_pool_layout = LayoutFilters().filters()["node_pool_layout"]
kwok_node_manifests = ManifestFilters().filters()["kwok_node_manifests"]
node_pools = PoolFilters().filters()["node_pools"]


def test_layout_returns_plain_dicts_for_templates() -> None:
    nodes = node_pool_layout([{"name": "gpu-a", "count": 2, "spares": 1}])
    assert [(n["name"], n["spare"]) for n in nodes] == [("gpu-a-001", False), ("gpu-a-002", False), ("gpu-a-003", True)]


def test_layout_errors_become_filter_errors_naming_the_field() -> None:
    with pytest.raises(AnsibleFilterError, match=r"^node_pool_pools\[0\]\.count: must be >= 1, got -1"):
        node_pool_layout([{"name": "gpu-a", "count": -1}], "node_pool_pools")


def test_node_pools_filter_normalizes_merges_and_requires_selectors_on_request() -> None:
    pools = node_pools(
        [{"name": "gpu-a", "count": "2"}], added=[{"name": "gpu-b", "count": 1}, {"name": "gpu-a", "count": 9}]
    )
    assert [(p["name"], p["count"], p["gpus_per_node"]) for p in pools] == [("gpu-a", 2, 8), ("gpu-b", 1, 8)]
    with pytest.raises(AnsibleFilterError, match=r"^new_pool\[0\]\.selector: is required on a real cluster"):
        node_pools([{"name": "gpu-a", "count": 2}], "new_pool", require_selector=True)


def test_manifests_use_the_pod_capacity_given() -> None:
    nodes = node_pool_layout([{"name": "gpu-a", "count": 1}])
    (manifest,) = kwok_node_manifests(nodes, "64")
    assert manifest["status"]["allocatable"]["pods"] == "64"


def test_manifests_reject_entries_that_are_not_layout_nodes() -> None:
    with pytest.raises(AnsibleFilterError, match="bad node entry"):
        kwok_node_manifests([{"name": "gpu-a-001"}])
