# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""A pool resized or removed: which nodes leave, what the pools become, and every refusal."""

from __future__ import annotations

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.fleet.pool_resize import resize_pool
from ansible_collections.gpufleet.resilience.plugins.module_utils.fleet.pools import parse_pools

POOLS = parse_pools([{"name": "gpu-a", "count": 4, "spares": 1}, {"name": "gpu-b", "count": 4, "spares": 1},
                     {"name": "gpu", "count": 2}])
# What Slurm has in service: every active node, and gpu-a-005 (a spare brought online).
IN_SERVICE = ["gpu-a-001", "gpu-a-002", "gpu-a-003", "gpu-a-004", "gpu-b-001", "gpu-b-002", "gpu-b-003",
              "gpu-b-004", "gpu-001", "gpu-002"]


def test_a_shrink_retires_the_highest_active_nodes_and_keeps_the_spares_count() -> None:
    plan = resize_pool(POOLS, "gpu-b", count=2, in_service=IN_SERVICE)
    assert plan.leaving == ["gpu-b-003", "gpu-b-004"]
    assert plan.after is not None and (plan.after.count, plan.after.spares) == (2, 1)
    assert [pool.name for pool in plan.pools] == ["gpu-a", "gpu-b", "gpu"]
    assert plan.pools[0] == POOLS[0] and plan.pools[2] == POOLS[2]
    assert plan.as_dict()["removed"] is False and plan.as_dict()["after"]["count"] == 2


def test_a_removal_retires_every_node_in_service_of_that_pool_only() -> None:
    plan = resize_pool(POOLS, "gpu", remove=True, in_service=IN_SERVICE)
    # gpu-b-001 starts with "gpu-" but is pool gpu-b's.
    assert plan.leaving == ["gpu-001", "gpu-002"]
    assert plan.after is None and [pool.name for pool in plan.pools] == ["gpu-a", "gpu-b"]
    assert plan.as_dict()["removed"] is True


def test_a_rerun_after_a_stop_halfway_plans_only_what_is_still_in_service() -> None:
    half_done = [node for node in IN_SERVICE if node != "gpu-b-003"]
    assert resize_pool(POOLS, "gpu-b", count=2, in_service=half_done).leaving == ["gpu-b-004"]
    assert resize_pool(POOLS, "gpu-b", count=2, in_service=[]).leaving == []


def test_a_growth_retires_nothing() -> None:
    plan = resize_pool(POOLS, "gpu-a", count=6, in_service=IN_SERVICE)
    assert plan.leaving == [] and plan.after is not None and plan.after.count == 6


def test_the_nodes_are_ordered_by_number_not_by_text() -> None:
    pools = parse_pools([{"name": "big", "count": 120}, {"name": "x", "count": 1}])
    plan = resize_pool(pools, "big", count=9, in_service=["big-100", "big-010", "big-009", "big-011"])
    assert plan.leaving == ["big-010", "big-011", "big-100"]


@pytest.mark.parametrize(
    ("changes", "field", "words"),
    [
        (dict(name="gpu-c", count=1), "pool", "no node pool is named 'gpu-c' (pools: gpu-a, gpu-b, gpu)"),
        (dict(name="GPU B", count=1), "pool", "must be lowercase"),
        (dict(name="gpu-b"), "count", "is required"),
        (dict(name="gpu-b", count=2, remove=True), "count", "not both"),
        (dict(name="gpu-b", count=0), "count", "must be >= 1"),
        (dict(name="gpu-b", count="two"), "count", "must be an integer"),
        (dict(name="gpu-b", count=999), "count", "must be <= 998"),
        (dict(name="gpu-b", count=2, replacements={"gpu-b-002": "gpu-b-005"}), "pool",
         "replacements in force: gpu-b-002 (replaced by gpu-b-005)"),
    ],
)
def test_bad_arguments_name_the_argument(changes, field, words) -> None:
    with pytest.raises(FieldError) as err:
        resize_pool(POOLS, in_service=IN_SERVICE, **changes)
    assert err.value.field == field and words in err.value.message


def test_a_replacement_in_another_pool_is_no_reason_to_refuse() -> None:
    plan = resize_pool(POOLS, "gpu-b", count=3, in_service=IN_SERVICE, replacements={"gpu-a-002": "gpu-a-005"})
    assert plan.leaving == ["gpu-b-004"]


def test_the_only_pool_is_not_removed() -> None:
    with pytest.raises(FieldError) as err:
        resize_pool(parse_pools([{"name": "gpu-a", "count": 2}]), "gpu-a", remove=True)
    assert err.value.field == "remove" and "only pool" in err.value.message
