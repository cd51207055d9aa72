# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""A node pool resized or removed: the pools afterwards, and the nodes that leave service.

Node names follow the pool model's layout (``<pool>-NNN``, the active nodes first, then the
spares). A pool resized to ``count`` keeps nodes 1..count active; nodes count+1..count+spares
become its spares (Slurm ``FUTURE``, no Kubernetes node), as the layout says for every pool; the
rest are gone. Which nodes are in service now is what Slurm says (the caller reads it), not what
the records say, so a run that stopped halfway and runs again retires only what is still in
service.

Pure data: no I/O, no clients.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.fields import check_int
from ansible_collections.gpufleet.resilience.plugins.module_utils.fleet.pools import (
    MAX_NODES_PER_POOL,
    NodePool,
    check_pool_name,
    expand_pool,
    parse_pool,
    pool_node_pattern,
)


@dataclass(frozen=True)
class PoolResize:
    pool: str
    before: NodePool
    after: Optional[NodePool]  # None: the pool is removed
    pools: List[NodePool]  # every pool afterwards, in the same order
    leaving: List[str]  # in service now and not active afterwards, in layout order

    def as_dict(self) -> Dict[str, Any]:
        return {
            "pool": self.pool,
            "before": self.before.as_dict(),
            "after": self.after.as_dict() if self.after else None,
            "pools": [pool.as_dict() for pool in self.pools],
            "leaving": list(self.leaving),
            "removed": self.after is None,
        }


def resize_pool(pools: Sequence[NodePool], name: Any, count: Any = None, remove: bool = False,
                in_service: Iterable[str] = (), replacements: Optional[Mapping[str, str]] = None) -> PoolResize:
    """Pool ``name`` of ``pools`` with ``count`` active nodes, or removed (``remove``).

    ``in_service``: the nodes in service now (Slurm's, FUTURE spares left out). ``replacements``:
    retired node -> the spare that replaced it, for the replacements in force (the lab's records).
    FieldError names the bad argument: ``pool``, ``count`` or ``remove``.
    """
    pool_name = check_pool_name(name, "pool")
    by_name = {pool.name: pool for pool in pools}
    if pool_name not in by_name:
        raise FieldError("pool", "no node pool is named %r (pools: %s)" % (pool_name, ", ".join(by_name) or "none"))
    if remove and count is not None:
        raise FieldError("count", "give count (resize) or remove=true (remove), not both")
    if not remove and count is None:
        raise FieldError("count", "is required: the pool's new number of active nodes (or remove=true)")
    before = by_name[pool_name]
    pattern = pool_node_pattern(pool_name)
    held = sorted(f"{retired} (replaced by {spare})" for retired, spare in (replacements or {}).items()
                  if pattern.fullmatch(retired) or pattern.fullmatch(spare))
    if held:
        raise FieldError("pool", "pool %s has replacements in force: %s; restore them first "
                         "(gpufleet.resilience.node_replace state=restored) so the layout is the pool's own"
                         % (pool_name, ", ".join(held)))
    if remove:
        if len(pools) == 1:
            raise FieldError("remove", "pool %s is the fleet's only pool: add another pool before removing it"
                             % pool_name)
        after = None
    else:
        # count + spares must fit the node suffix, as for every pool.
        new_count = check_int(count, "count", 1, MAX_NODES_PER_POOL - before.spares)
        after = parse_pool(dict(before.as_dict(), count=new_count), "pool")
    staying = {node.name for node in expand_pool(after) if not node.spare} if after else set()
    leaving = sorted((node for node in set(in_service) if pattern.fullmatch(node) and node not in staying),
                     key=lambda node: int(node.rsplit("-", 1)[1]))
    new_pools = [after if pool.name == pool_name else pool for pool in pools]
    return PoolResize(pool=pool_name, before=before, after=after,
                      pools=[pool for pool in new_pools if pool is not None], leaving=leaving)
