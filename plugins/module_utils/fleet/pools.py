# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The one model of a GPU node pool: the only place that validates and expands pools.

The inventory keeps one list, ``gpufleet_node_pools``. Every consumer reads it through
``parse_pools``: the lab layout (kwok nodes, Slurm lab nodes), the Slinky chart values, the
filters, ``add-node-pool.yml`` and both backends of the ``node_pool`` role. The limits are the
strictest that any consumer needs, so a pool that passes here passes everywhere and a bad one
fails before anything changes:

- ``name`` becomes a Kubernetes label value (``gpufleet.io/pool``), a DNS label in node names
  ``<name>-NNN`` and in pod names ``<release>-<name>-<ordinal>`` of the Slinky NodeSet, a Slurm
  node name prefix and a Slurm feature ``pool-<name>``: lowercase letters, digits and ``-``,
  at most 40 characters.
- ``count + spares`` fits the 3-digit node suffix (999).
- ``selector`` and ``labels`` are Kubernetes label keys and values; ``taints`` are taints the
  pool's nodes carry; ``tolerations`` are what the pool's Slurm pods tolerate (never a cordon
  or a gpufleet.io/ health taint: a cordon must keep meaning "drain this node in Slurm").

Node ``<pool>-NNN`` (1-based, 3 digits) sits in rack ``<pool>-rack-<r>`` with
``r = (NNN - 1) // nodes_per_rack + 1`` and in block ``<pool>-block-<b>`` with
``b = (r - 1) // racks_per_block + 1``. Spares continue the numbering after the active nodes,
so a spare that replaces a failed node already has its place in the topology.

Pure data: no I/O, no clients.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Sequence, Tuple

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.fields import (
    check_int,
    check_label_key,
    check_label_value,
    check_mapping,
    check_sequence,
)

POOLS_VARIABLE = "gpufleet_node_pools"
POOL_LABEL = "gpufleet.io/pool"
RACK_LABEL = "gpufleet.io/rack"
BLOCK_LABEL = "gpufleet.io/block"
# Taints that mark a node as not for new work. Remediation owns the gpufleet.io/ ones.
CORDON_TAINT = "node.kubernetes.io/unschedulable"
OWN_PREFIX = "gpufleet.io/"
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
TOLERATION_EFFECTS = ("", *TAINT_EFFECTS)
TOLERATION_OPERATORS = ("Equal", "Exists")
MAX_NODES_PER_POOL = 999
MAX_POOL_NAME = 40

# Every key a pool may have, with its default (None: required).
POOL_FIELDS: Dict[str, Any] = {
    "name": None,
    "count": None,
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
# Upper bounds that catch typos (memory given in bytes, a node count with an extra digit).
_MAX = {"gpus_per_node": 64, "cpus": 4096, "memory_mb": 64 * 1024 * 1024, "nodes_per_rack": 999, "racks_per_block": 999}

_POOL_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,%d}[a-z0-9])?" % (MAX_POOL_NAME - 2))


@dataclass(frozen=True)
class Taint:
    key: str
    effect: str
    value: str = ""

    def as_dict(self) -> Dict[str, str]:
        return {"key": self.key, "value": self.value, "effect": self.effect}


@dataclass(frozen=True)
class NodePool:
    """One pool of identical GPU nodes, validated."""

    name: str
    count: int
    spares: int = 0
    gpus_per_node: int = 8
    gpu_product: str = "NVIDIA-H100-80GB-HBM3"
    zone: str = "lab-zone-a"
    nodes_per_rack: int = 4
    racks_per_block: int = 2
    cpus: int = 16
    memory_mb: int = 65536
    # On a real cluster: the node labels that find the pool's nodes (e.g. a node group label).
    selector: Dict[str, str] = field(default_factory=dict)
    # Labels and taints the pool's nodes get (gpufleet.io/pool=<name> is always added).
    labels: Dict[str, str] = field(default_factory=dict)
    taints: Tuple[Taint, ...] = ()
    # What the pool's Slurm pods tolerate, besides the fleet-wide tolerations.
    tolerations: Tuple[Dict[str, Any], ...] = ()

    @property
    def node_labels(self) -> Dict[str, str]:
        """Labels every node of the pool carries."""
        labels = dict(self.labels)
        labels[POOL_LABEL] = self.name
        return labels

    @property
    def selector_string(self) -> str:
        """The selector as a Kubernetes label selector (``k=v,k2=v2``)."""
        return ",".join("%s=%s" % item for item in sorted(self.selector.items()))

    def as_dict(self) -> Dict[str, Any]:
        """The pool in the inventory's schema, with every default filled in."""
        data = asdict(self)
        data["taints"] = [t.as_dict() for t in self.taints]
        data["tolerations"] = [dict(t) for t in self.tolerations]
        return data


@dataclass(frozen=True)
class PoolNode:
    name: str
    pool: str
    index: int
    rack: str
    block: str
    zone: str
    gpus: int
    gpu_product: str
    cpus: int
    memory_mb: int
    spare: bool
    # The pool's own labels and taints (the lab puts them on its simulated nodes).
    labels: Dict[str, str] = field(default_factory=dict)
    taints: Tuple[Dict[str, str], ...] = ()


# ---- field checks -------------------------------------------------------------------------


def _labels(value: Any, where: str) -> Dict[str, str]:
    return {
        check_label_key(key, "%s[%r]" % (where, key)): check_label_value(val, "%s[%r]" % (where, key))
        for key, val in check_mapping(value, where).items()
    }


def check_taint(value: Any, where: str) -> Taint:
    taint = check_mapping(value, where)
    unknown = sorted(set(taint) - {"key", "value", "effect"})
    if unknown:
        raise FieldError("%s.%s" % (where, unknown[0]), "unknown taint field (key, value, effect)")
    key = check_label_key(taint.get("key"), where + ".key")
    if key == CORDON_TAINT or key.startswith(OWN_PREFIX):
        raise FieldError(where + ".key", "%r is set by cordon or by remediation, not by a pool" % key)
    effect = taint.get("effect")
    if effect not in TAINT_EFFECTS:
        raise FieldError(where + ".effect", "must be one of %s, got %r" % (", ".join(TAINT_EFFECTS), effect))
    raw_value = taint.get("value")
    value_text = "" if raw_value is None else check_label_value(raw_value, where + ".value")
    return Taint(key=key, value=value_text, effect=effect)


def check_toleration(value: Any, where: str) -> Dict[str, Any]:
    """A pod toleration; refuses the ones that would let a Slurm pod onto a cordoned node."""
    toleration = check_mapping(value, where)
    unknown = sorted(set(toleration) - {"key", "operator", "value", "effect", "tolerationSeconds"})
    if unknown:
        raise FieldError("%s.%s" % (where, unknown[0]), "unknown toleration field")
    key = toleration.get("key", "") or ""
    if not isinstance(key, str):
        raise FieldError(where + ".key", "must be a string, got %r" % (key,))
    if key:
        check_label_key(key, where + ".key")
    operator = toleration.get("operator", "Equal")
    if operator not in TOLERATION_OPERATORS:
        raise FieldError(where + ".operator", "must be Equal or Exists, got %r" % (operator,))
    if operator == "Exists" and toleration.get("value") not in (None, ""):
        raise FieldError(where + ".value", "must be empty with operator Exists")
    if toleration.get("effect", "") not in TOLERATION_EFFECTS:
        raise FieldError(where + ".effect", "must be one of %s" % ", ".join(e or '""' for e in TOLERATION_EFFECTS))
    # A cordon taints the node node.kubernetes.io/unschedulable and Slinky's operator turns it
    # into a Slurm drain; a replacement slurmd pod tolerating it (or everything) would undo that.
    if not key and operator == "Exists":
        raise FieldError(where + ".key", "an empty key with operator Exists tolerates every taint, cordons included")
    if key == CORDON_TAINT or key.startswith(OWN_PREFIX):
        raise FieldError(
            where + ".key", "%r marks a cordoned or unhealthy node; slurmd pods must not tolerate it" % key
        )
    return dict(toleration)


def check_pool_name(name: Any, where: str) -> str:
    if not isinstance(name, str) or not _POOL_NAME.fullmatch(name):
        raise FieldError(
            where,
            "must be lowercase letters, digits and '-' (starting and ending with a letter or digit), "
            "at most %d characters, got %r" % (MAX_POOL_NAME, name),
        )
    return name


# ---- pools --------------------------------------------------------------------------------


def parse_pool(raw: Any, where: str, require_selector: bool = False) -> NodePool:
    """One pool from the inventory; ``where`` is its field path (``gpufleet_node_pools[0]``)."""
    pool = check_mapping(raw, where)
    unknown = sorted(set(pool) - set(POOL_FIELDS))
    if unknown:
        raise FieldError("%s.%s" % (where, unknown[0]), "unknown pool field (known: %s)" % ", ".join(POOL_FIELDS))
    for key, default in POOL_FIELDS.items():
        if default is None and pool.get(key) is None:
            raise FieldError("%s.%s" % (where, key), "is required")

    def get(key: str) -> Any:
        value = pool.get(key)
        return POOL_FIELDS[key] if value is None else value

    name = check_pool_name(get("name"), where + ".name")
    count = check_int(get("count"), where + ".count", 1, MAX_NODES_PER_POOL)
    spares = check_int(get("spares"), where + ".spares", 0, MAX_NODES_PER_POOL)
    if count + spares > MAX_NODES_PER_POOL:
        raise FieldError(
            where + ".spares", "count + spares must be <= %d, got %d" % (MAX_NODES_PER_POOL, count + spares)
        )
    ints = {
        key: check_int(get(key), "%s.%s" % (where, key), 1, _MAX[key])
        for key in ("gpus_per_node", "nodes_per_rack", "racks_per_block", "cpus", "memory_mb")
    }
    selector = _labels(get("selector"), where + ".selector")
    if require_selector and not selector:
        raise FieldError(
            where + ".selector",
            "is required on a real cluster: the node labels that find this pool's nodes, "
            "e.g. {node.kubernetes.io/instance-type: p5.48xlarge}",
        )
    labels = _labels(get("labels"), where + ".labels")
    if labels.get(POOL_LABEL, name) != name:
        raise FieldError("%s.labels[%r]" % (where, POOL_LABEL), "is set to the pool name %r; leave it out" % name)
    raw_taints = check_sequence(get("taints"), where + ".taints")
    taints = tuple(check_taint(t, "%s.taints[%d]" % (where, i)) for i, t in enumerate(raw_taints))
    seen_taints = set()
    for i, taint in enumerate(taints):
        if (taint.key, taint.effect) in seen_taints:
            raise FieldError("%s.taints[%d]" % (where, i), "taint %s:%s is given twice" % (taint.key, taint.effect))
        seen_taints.add((taint.key, taint.effect))
    tolerations = tuple(
        check_toleration(t, "%s.tolerations[%d]" % (where, i))
        for i, t in enumerate(check_sequence(get("tolerations"), where + ".tolerations"))
    )
    return NodePool(
        name=name,
        count=count,
        spares=spares,
        gpu_product=check_label_value(get("gpu_product"), where + ".gpu_product"),
        zone=check_label_value(get("zone"), where + ".zone"),
        selector=selector,
        labels=labels,
        taints=taints,
        tolerations=tolerations,
        **ints,
    )


def parse_pools(raw: Any, variable: str = POOLS_VARIABLE, require_selector: bool = False) -> List[NodePool]:
    """Every pool of the list; names must be unique. ``variable`` is used in error messages."""
    pools: List[NodePool] = []
    seen: Dict[str, int] = {}
    for position, item in enumerate(check_sequence(raw, variable)):
        where = "%s[%d]" % (variable, position)
        pool = parse_pool(item, where, require_selector)
        if pool.name in seen:
            raise FieldError(where + ".name", "%r is also the name of %s[%d]" % (pool.name, variable, seen[pool.name]))
        seen[pool.name] = position
        pools.append(pool)
    return pools


# Node names: <pool>-NNN, 1-based, three digits (count + spares is at most 999).
NODE_NAME = "%s-%03d"


def pool_node_pattern(name: str) -> "re.Pattern[str]":
    """Node names of pool ``name`` (NODE_NAME) and of no other pool (``gpu-b-001`` is not pool ``gpu``'s)."""
    return re.compile(r"%s-[0-9]{3}" % re.escape(name))


def expand_pool(pool: NodePool) -> List[PoolNode]:
    """Every node of one pool, active ones first, then the spares."""
    nodes = []
    for index in range(1, pool.count + pool.spares + 1):
        rack = (index - 1) // pool.nodes_per_rack + 1
        block = (rack - 1) // pool.racks_per_block + 1
        nodes.append(
            PoolNode(
                name=NODE_NAME % (pool.name, index),
                pool=pool.name,
                index=index,
                rack="%s-rack-%d" % (pool.name, rack),
                block="%s-block-%d" % (pool.name, block),
                zone=pool.zone,
                gpus=pool.gpus_per_node,
                gpu_product=pool.gpu_product,
                cpus=pool.cpus,
                memory_mb=pool.memory_mb,
                spare=index > pool.count,
                labels=dict(pool.labels),
                taints=tuple(t.as_dict() for t in pool.taints),
            )
        )
    return nodes


def expand_pools(pools: Sequence[NodePool]) -> List[PoolNode]:
    return [node for pool in pools for node in expand_pool(pool)]


def node_as_dict(node: PoolNode) -> Dict[str, Any]:
    data = asdict(node)
    data["taints"] = [dict(t) for t in node.taints]
    return data


def merge_pools(
    inventory: Any, added: Any, variable: str = POOLS_VARIABLE, require_selector: bool = False
) -> List[NodePool]:
    """The inventory's pools followed by pools recorded elsewhere (the lab's add-node-pool
    records); the inventory wins on a name clash. Both are validated."""
    own = parse_pools(inventory, variable, require_selector)
    names = {pool.name for pool in own}
    recorded = parse_pools(added, "recorded node pools", require_selector)
    return own + [pool for pool in recorded if pool.name not in names]
