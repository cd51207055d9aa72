# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Expand GPU node pools (the inventory's gpufleet_node_pools) into their nodes.

Node ``<pool>-NNN`` (1-based, 3 digits) sits in rack ``<pool>-rack-<r>`` with
``r = (NNN - 1) // nodes_per_rack + 1`` and in block ``<pool>-block-<b>`` with
``b = (r - 1) // racks_per_block + 1``. Spares continue the numbering after the active nodes,
so a spare that replaces a failed node already has its place in the topology.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any, Dict, List, Mapping, Optional

from ansible.errors import AnsibleFilterError

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
# Node names must stay DNS labels (<= 63 characters) with the "-NNN" suffix.
_POOL_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,57}[a-z0-9])?$")
# Kubernetes label values (zone, GPU product).
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
# Three digits in the node name.
MAX_NODES_PER_POOL = 999


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
        raise AnsibleFilterError(f"{where}.{key} is required")
    return value


def _label_value(pool: Mapping[str, Any], key: str, where: str) -> str:
    value = str(_field(pool, key, where))
    if not _LABEL_VALUE.match(value):
        raise AnsibleFilterError(f"{where}.{key} {value!r} is not a valid Kubernetes label value")
    return value


def _positive_int(pool: Mapping[str, Any], key: str, where: str, minimum: int) -> int:
    value = _field(pool, key, where)
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise AnsibleFilterError(f"{where}.{key} must be an integer, got {value!r}") from None
    if number < minimum:
        raise AnsibleFilterError(f"{where}.{key} must be >= {minimum}, got {number}")
    return number


def expand_pool(pool: Mapping[str, Any], where: str) -> List[PoolNode]:
    name = str(_field(pool, "name", where))
    if not _POOL_NAME.match(name):
        raise AnsibleFilterError(
            f"{where}.name {name!r} must be lowercase letters, digits and '-', at most 59 characters"
        )
    count = _positive_int(pool, "count", where, 0)
    spares = _positive_int(pool, "spares", where, 0)
    if count + spares > MAX_NODES_PER_POOL:
        raise AnsibleFilterError(f"{where}: count + spares must be <= {MAX_NODES_PER_POOL}, got {count + spares}")
    gpus = _positive_int(pool, "gpus_per_node", where, 0)
    nodes_per_rack = _positive_int(pool, "nodes_per_rack", where, 1)
    racks_per_block = _positive_int(pool, "racks_per_block", where, 1)
    cpus = _positive_int(pool, "cpus", where, 1)
    memory_mb = _positive_int(pool, "memory_mb", where, 1)
    nodes = []
    for index in range(1, count + spares + 1):
        rack = (index - 1) // nodes_per_rack + 1
        block = (rack - 1) // racks_per_block + 1
        nodes.append(PoolNode(
            name=f"{name}-{index:03d}", pool=name, index=index,
            rack=f"{name}-rack-{rack}", block=f"{name}-block-{block}",
            zone=_label_value(pool, "zone", where), gpus=gpus,
            gpu_product=_label_value(pool, "gpu_product", where),
            cpus=cpus, memory_mb=memory_mb, spare=index > count,
        ))
    return nodes


def node_pool_layout(pools: Optional[List[Mapping[str, Any]]], variable: str = "gpufleet_node_pools") -> List[Dict[str, Any]]:
    """Every node (active and spare) of every pool, as dicts; errors name the bad field."""
    if not isinstance(pools, list):
        raise AnsibleFilterError(f"{variable} must be a list of pools, got {type(pools).__name__}")
    nodes: List[PoolNode] = []
    seen = set()
    for position, pool in enumerate(pools):
        where = f"{variable}[{position}]"
        if not isinstance(pool, Mapping):
            raise AnsibleFilterError(f"{where} must be a dict")
        if pool.get("name") in seen:
            raise AnsibleFilterError(f"{where}.name {pool.get('name')!r} is used by another pool")
        seen.add(pool.get("name"))
        nodes.extend(expand_pool(pool, where))
    return [asdict(node) for node in nodes]


# kwok's controller takes over the nodes that carry this annotation (see the kubernetes role).
KWOK_ANNOTATION = ("kwok.x-k8s.io/node", "fake")


def kwok_node_manifest(node: Mapping[str, Any], max_pods: int = 110) -> Dict[str, Any]:
    """The Node object of one simulated GPU node.

    The status is sent with the create: the API server keeps a new node's capacity, kwok's
    ready stage keeps it too, and the scheduler then sees nvidia.com/gpu like on a real node
    with the device plugin. No taint: in the lab every workload is meant to land on these
    nodes, and manifests stay the same as on a real cluster.
    """
    gpus = str(node["gpus"])
    resources = {
        "cpu": str(node["cpus"]),
        "memory": f"{node['memory_mb']}Mi",
        "pods": str(max_pods),
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


def kwok_node_manifests(nodes: List[Mapping[str, Any]], max_pods: int = 110) -> List[Dict[str, Any]]:
    return [kwok_node_manifest(node, int(max_pods)) for node in nodes]


class FilterModule:
    def filters(self) -> Dict[str, Any]:
        return {"node_pool_layout": node_pool_layout, "node_pool_kwok_nodes": kwok_node_manifests}
