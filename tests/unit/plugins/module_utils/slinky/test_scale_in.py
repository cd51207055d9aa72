# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""A Slinky pool's scale-in plan: which Slurm nodes leave, their jobs, what is not drained."""

from __future__ import annotations

from typing import Any, Dict

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.slinky.scale_in import scale_in


def node(name: str, state: str = "IDLE", flags=(), features=(), jobs=()) -> Dict[str, Any]:
    return {"name": name, "state": state, "flags": list(flags), "features": list(features), "jobs": list(jobs)}


JOB = {"job_id": "41", "name": "train", "user": "alice"}
# Slinky's names (<pool>-<ordinal>, unpadded, so gpu-b-10 sorts after gpu-b-9), a node of pool
# gpu-b-x that must not count as gpu-b's, and a node named otherwise that carries the pool's feature.
NODES = [node("gpu-b-%d" % n) for n in (10, 0, 9, 1)] + [
    node("gpu-b-x-0", jobs=[JOB]),
    node("gpu-b-ex-2", features=["pool-gpu-b"]),
]


def test_a_scale_in_takes_the_highest_ordinals_as_the_nodeset_does():
    plan = scale_in(NODES, "gpu-b", count=9)
    assert plan["leaving"] == ["gpu-b-9", "gpu-b-10"]
    assert plan["count"] == 9 and not plan["removed"]


def test_a_removal_takes_every_node_named_or_featured_as_the_pool_and_no_other_pools():
    plan = scale_in(NODES, "gpu-b", remove=True)
    assert plan["leaving"] == ["gpu-b-0", "gpu-b-1", "gpu-b-ex-2", "gpu-b-9", "gpu-b-10"]
    assert "gpu-b-x-0" not in plan["leaving"]


def test_jobs_and_nodes_that_would_still_take_one_are_named():
    nodes = [node("gpu-a-0", flags=["DRAIN"]), node("gpu-a-1", state="MIXED", jobs=[JOB]),
             node("gpu-a-2", state="DOWN"), node("gpu-a-3", state="FUTURE"),
             node("gpu-a-4", state="ALLOCATED", flags=["DRAIN"], jobs=[dict(JOB, job_id="42")])]
    plan = scale_in(nodes, "gpu-a", remove=True)
    assert plan["leaving"] == ["gpu-a-0", "gpu-a-1", "gpu-a-2", "gpu-a-4"], "a FUTURE node is not in service"
    assert plan["undrained"] == ["gpu-a-1"]
    assert [(job["job_id"], job["node"]) for job in plan["jobs"]] == [("41", "gpu-a-1"), ("42", "gpu-a-4")]
    assert plan["jobs_text"] == "41 (train, alice) on gpu-a-1, 42 (train, alice) on gpu-a-4"


def test_a_drained_idle_pool_has_nothing_in_the_way():
    plan = scale_in([node("gpu-a-0", flags=["DRAIN"]), node("gpu-a-1", state="DOWN", flags=["DRAIN"])],
                    "gpu-a", remove=True)
    assert plan["jobs"] == [] and plan["undrained"] == [] and plan["jobs_text"] == ""


@pytest.mark.parametrize("kwargs, field", [
    ({"pool": "Gpu_B", "remove": True}, "pool"),
    ({"pool": "gpu-z", "remove": True, "pools": ["gpu-a", "gpu-b"]}, "pool"),
    ({"pool": "gpu-b"}, "count"),
    ({"pool": "gpu-b", "count": 2, "remove": True}, "count"),
    ({"pool": "gpu-b", "count": 0}, "count"),
    ({"pool": "gpu-b", "count": "two"}, "count"),
    ({"pool": "gpu-b", "count": True}, "count"),
])
def test_bad_arguments_are_named(kwargs, field):
    with pytest.raises(FieldError) as raised:
        scale_in(NODES, **kwargs)
    assert raised.value.field == field
