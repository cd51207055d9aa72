# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Which Slurm nodes leave when a Slinky pool shrinks or goes, and what still holds them.

A Slinky NodeSet names its pods, and so its Slurm nodes, ``<pool>-<ordinal>``: the ``slurm`` chart
sets the pod hostname prefix ``<key>-`` and pads no ordinal (``ordinalPadding: 0``). The values the
collection generates also give every node of a pool the feature ``pool-<name>``
(``slinky/values.py``). A NodeSet in StatefulSet mode scales in from its highest ordinal down, so a
pool resized to ``count`` loses ordinals ``count`` and above.

The nodes are the ``nodes`` of ``slurm_node_info`` (either Slurm API), read by the caller: dicts
with ``name``, ``state``, ``flags``, ``features`` and ``jobs``. A run that stopped halfway reads
them again and plans what is left. Pure data: no I/O, no clients.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Mapping, Optional, Sequence

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.fields import check_int
from ansible_collections.gpufleet.resilience.plugins.module_utils.fleet.pools import (
    MAX_NODES_PER_POOL,
    check_pool_name,
)

# A node in one of these base states takes no job, drained or not.
OUT_OF_SERVICE = ("DOWN",)


def in_pool(node: Mapping[str, Any], pool: str) -> bool:
    """The node carries the pool's feature, or its name is the pool's and an ordinal
    (``gpu-a-0`` and the lab's ``gpu-a-001``; ``gpu-a-b-0`` belongs to pool ``gpu-a-b``)."""
    if "pool-%s" % pool in (node.get("features") or ()):
        return True
    return re.fullmatch(r"%s-[0-9]+" % re.escape(pool), str(node.get("name", ""))) is not None


def ordinal(name: str) -> int:
    found = re.search(r"-([0-9]+)$", name)
    if found is None:
        raise FieldError("nodes", "node %s: the name does not end in an ordinal (<pool>-<n>)" % name)
    return int(found.group(1))


def scale_in(nodes: Sequence[Mapping[str, Any]], pool: Any, count: Any = None, remove: bool = False,
             pools: Sequence[str] = ()) -> Dict[str, Any]:
    """The plan for pool ``pool`` (one of ``pools``, the inventory's pool names, when given):
    ``leaving`` (names, lowest ordinal first), the ``jobs`` on them (each with its ``node``) and the
    ``undrained`` ones (neither drained nor out of service). FieldError names the bad argument."""
    name = check_pool_name(pool, "pool")
    if pools and name not in pools:
        raise FieldError("pool", "no node pool is named %r in gpufleet_node_pools (pools: %s)"
                         % (name, ", ".join(pools)))
    if remove and count not in (None, ""):
        raise FieldError("count", "give count (resize) or remove=true (remove), not both")
    if not remove and count in (None, ""):
        raise FieldError("count", "is required: the pool's new number of nodes (or remove=true)")
    new_count: Optional[int] = None if remove else check_int(count, "count", 1, MAX_NODES_PER_POOL)
    # A FUTURE node is a name in slurm.conf, not in service: nothing to drain (Slinky's dynamic
    # nodes have none; a lab standing in for it has its spares).
    members = sorted((node for node in nodes if in_pool(node, name) and node.get("state") != "FUTURE"),
                     key=lambda node: ordinal(node["name"]))
    leaving = [node for node in members if new_count is None or ordinal(node["name"]) >= new_count]
    jobs: List[Dict[str, Any]] = []
    undrained: List[str] = []
    for node in leaving:
        jobs.extend(dict(job, node=node["name"]) for job in node.get("jobs") or ())
        if "DRAIN" not in (node.get("flags") or ()) and node.get("state") not in OUT_OF_SERVICE:
            undrained.append(node["name"])
    return {"pool": name, "removed": bool(remove), "count": new_count,
            "leaving": [node["name"] for node in leaving], "jobs": jobs, "undrained": undrained,
            "jobs_text": describe_jobs(jobs)}


def describe_jobs(jobs: Sequence[Mapping[str, Any]]) -> str:
    """``12 (train, alice) on gpu-a-3, ...``: how the refusals name the jobs."""
    return ", ".join("%s (%s, %s) on %s" % (job.get("job_id"), job.get("name"), job.get("user"), job["node"])
                     for job in jobs)
