# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Where each node of a GPU node pool sits, and the Node object that simulates it in the lab.

Node ``<pool>-NNN`` (1-based, 3 digits) sits in rack ``<pool>-rack-<r>`` with
``r = (NNN - 1) // nodes_per_rack + 1`` and in block ``<pool>-block-<b>`` with
``b = (r - 1) // racks_per_block + 1``. Spares continue the numbering after the active nodes,
so a spare that replaces a failed node already has its place in the topology.

Pure data: no I/O, no clients.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any, Dict, List, Mapping

POOL_DEFAULTS: Dict[str, Any] = {
    "spares": 0,
    "gpus_per_node": 8,
    "gpu_product": "NVIDIA-H100-80GB-HBM3",
    "zone": "lab-zone-a",
    "nodes_per_rack": 4,
    "racks_per_block": 2,
    "cpus": 16,
    "memory_mb": 65536,
}
# Node names stay DNS labels (<= 63 characters) with the "-NNN" suffix.
_POOL_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,57}[a-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
MAX_NODES_PER_POOL = 999
# kwok's controller takes over the nodes that carry this annotation (the kubernetes role
# starts it with --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake).
KWOK_ANNOTATION = ("kwok.x-k8s.io/node", "fake")


class NodeLayoutError(ValueError):
    """A pool definition is invalid; the message names the field."""


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


def _field(pool: Mapping[str, Any], key: str, where: str) -> Any:
    value = pool.get(key, POOL_DEFAULTS.get(key))
    if value is None:
        raise NodeLayoutError("%s.%s is required" % (where, key))
    return value


def _label_value(pool: Mapping[str, Any], key: str, where: str) -> str:
    value = str(_field(pool, key, where))
    if not _LABEL_VALUE.match(value):
        raise NodeLayoutError("%s.%s %r is not a valid Kubernetes label value" % (where, key, value))
    return value


def _int_at_least(pool: Mapping[str, Any], key: str, where: str, minimum: int) -> int:
    value = _field(pool, key, where)
    if isinstance(value, bool):
        raise NodeLayoutError("%s.%s must be an integer, got %r" % (where, key, value))
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise NodeLayoutError("%s.%s must be an integer, got %r" % (where, key, value)) from None
    if number < minimum:
        raise NodeLayoutError("%s.%s must be >= %d, got %d" % (where, key, minimum, number))
    return number


def expand_pool(pool: Mapping[str, Any], where: str) -> List[PoolNode]:
    """Every node of one pool, active ones first, then the spares."""
    name = str(_field(pool, "name", where))
    if not _POOL_NAME.match(name):
        raise NodeLayoutError(
            "%s.name %r must be lowercase letters, digits and '-', at most 59 characters" % (where, name)
        )
    count = _int_at_least(pool, "count", where, 0)
    spares = _int_at_least(pool, "spares", where, 0)
    if count + spares > MAX_NODES_PER_POOL:
        raise NodeLayoutError("%s: count + spares must be <= %d, got %d" % (where, MAX_NODES_PER_POOL, count + spares))
    gpus = _int_at_least(pool, "gpus_per_node", where, 0)
    nodes_per_rack = _int_at_least(pool, "nodes_per_rack", where, 1)
    racks_per_block = _int_at_least(pool, "racks_per_block", where, 1)
    cpus = _int_at_least(pool, "cpus", where, 1)
    memory_mb = _int_at_least(pool, "memory_mb", where, 1)
    zone = _label_value(pool, "zone", where)
    gpu_product = _label_value(pool, "gpu_product", where)
    nodes = []
    for index in range(1, count + spares + 1):
        rack = (index - 1) // nodes_per_rack + 1
        block = (rack - 1) // racks_per_block + 1
        nodes.append(
            PoolNode(
                name="%s-%03d" % (name, index),
                pool=name,
                index=index,
                rack="%s-rack-%d" % (name, rack),
                block="%s-block-%d" % (name, block),
                zone=zone,
                gpus=gpus,
                gpu_product=gpu_product,
                cpus=cpus,
                memory_mb=memory_mb,
                spare=index > count,
            )
        )
    return nodes


def expand_pools(pools: Any, variable: str = "gpufleet_node_pools") -> List[PoolNode]:
    """Every node (active and spare) of every pool; pool names must be unique."""
    if not isinstance(pools, list):
        raise NodeLayoutError("%s must be a list of pools, got %s" % (variable, type(pools).__name__))
    nodes: List[PoolNode] = []
    seen = set()
    for position, pool in enumerate(pools):
        where = "%s[%d]" % (variable, position)
        if not isinstance(pool, Mapping):
            raise NodeLayoutError("%s must be a dict" % where)
        if pool.get("name") in seen:
            raise NodeLayoutError("%s.name %r is used by another pool" % (where, pool.get("name")))
        seen.add(pool.get("name"))
        nodes.extend(expand_pool(pool, where))
    return nodes


def node_as_dict(node: PoolNode) -> Dict[str, Any]:
    return asdict(node)


def kwok_node_manifest(node: Mapping[str, Any], max_pods: int = 110) -> Dict[str, Any]:
    """The Node object of one simulated GPU node (``node`` as from ``node_as_dict``).

    The status goes with the create: the API server keeps a new node's capacity, the lab's
    kwok ready stage keeps it too, and the scheduler then sees nvidia.com/gpu as on a real node
    with the device plugin. No taint: in the lab every workload is meant to land on these
    nodes, and manifests stay the same as on a real cluster.
    """
    gpus = str(node["gpus"])
    resources = {
        "cpu": str(node["cpus"]),
        "memory": "%dMi" % int(node["memory_mb"]),
        "pods": str(int(max_pods)),
        "nvidia.com/gpu": gpus,
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": node["name"],
            "annotations": {KWOK_ANNOTATION[0]: KWOK_ANNOTATION[1]},
            "labels": {
                "type": "kwok",
                "kubernetes.io/hostname": node["name"],
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "nvidia.com/gpu.present": "true",
                "nvidia.com/gpu.product": node["gpu_product"],
                "nvidia.com/gpu.count": gpus,
                "topology.kubernetes.io/zone": node["zone"],
                "gpufleet.io/pool": node["pool"],
                "gpufleet.io/rack": node["rack"],
                "gpufleet.io/block": node["block"],
            },
        },
        "status": {"capacity": dict(resources), "allocatable": dict(resources)},
    }
