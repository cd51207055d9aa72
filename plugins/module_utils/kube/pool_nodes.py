# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Mark the nodes of each GPU node pool on a real cluster: its labels and taints.

Every pool's selector is resolved before the first write, so a pool that matches no node, or a
node that two pools claim, fails the whole run with nothing changed.
"""

from __future__ import annotations

from typing import Any, Dict, List, Sequence

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.fleet.pools import NodePool
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.nodes import NodeWriter


def find_pool_nodes(writer: NodeWriter, pools: Sequence[NodePool], variable: str) -> Dict[str, List[str]]:
    """Node names per pool, sorted; raises FieldError naming the pool's selector."""
    found: Dict[str, List[str]] = {}
    owner: Dict[str, str] = {}
    for index, pool in enumerate(pools):
        where = "%s[%d].selector" % (variable, index)
        if not pool.selector:
            raise FieldError(where, "pool %r has no selector; on a real cluster it finds the pool's nodes" % pool.name)
        names = sorted(node["metadata"]["name"] for node in writer.list_nodes(pool.selector_string))
        if not names:
            raise FieldError(where, "pool %r: selector %s matches no node" % (pool.name, pool.selector_string))
        for name in names:
            if name in owner:
                raise FieldError(where, "pool %r: node %s is also matched by pool %r" % (pool.name, name, owner[name]))
            owner[name] = pool.name
        found[pool.name] = names
    return found


def mark_pools(
    writer: NodeWriter, pools: Sequence[NodePool], variable: str, check_mode: bool = False
) -> Dict[str, Any]:
    """Label and taint every node of every pool. Returns a per-pool report and the warnings."""
    found = find_pool_nodes(writer, pools, variable)
    report: List[Dict[str, Any]] = []
    warnings: List[str] = []
    changed = False
    for pool in pools:
        taints = [t.as_dict() for t in pool.taints]
        results = [writer.apply(name, pool.node_labels, taints, check_mode=check_mode) for name in found[pool.name]]
        changed = changed or any(r.changed for r in results)
        if len(results) < pool.count:
            warnings.append(
                "pool %r: count is %d but its selector matches %d node(s); Slurm will wait for the rest"
                % (pool.name, pool.count, len(results))
            )
        report.append(
            {
                "name": pool.name,
                "selector": pool.selector_string,
                "nodes": [r.name for r in results],
                "changed_nodes": [r.name for r in results if r.changed],
                "conflicts_retried": sum(r.attempts - 1 for r in results),
                "diff": [{"node": r.name, "before": r.before, "after": r.after} for r in results if r.changed],
            }
        )
    return {"changed": changed, "pools": report, "warnings": warnings}
