# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The Node object that simulates one GPU node of a pool in the lab.

Pools are validated and expanded into nodes by ``module_utils.fleet.pools``, the one pool
model; this file only turns a node of that layout into a kwok-managed Node.

Pure data: no I/O, no clients.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping

from ansible_collections.gpufleet.resilience.plugins.module_utils.fleet.pools import (
    BLOCK_LABEL,
    POOL_LABEL,
    RACK_LABEL,
)

# kwok's controller takes over the nodes that carry this annotation (the kubernetes role
# starts it with --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake).
KWOK_ANNOTATION = ("kwok.x-k8s.io/node", "fake")


def kwok_node_manifest(node: Mapping[str, Any], max_pods: int = 110) -> Dict[str, Any]:
    """The Node object of one simulated GPU node (``node`` as from ``node_as_dict``).

    The status goes with the create: the API server keeps a new node's capacity, the lab's
    kwok ready stage keeps it too, and the scheduler then sees nvidia.com/gpu as on a real node
    with the device plugin. No taint of the lab's own: every workload is meant to land on these
    nodes, so manifests stay the same as on a real cluster. A pool's own labels and taints
    (``labels``, ``taints``) go on as a real pool's nodes carry them.
    """
    gpus = str(node["gpus"])
    resources = {
        "cpu": str(node["cpus"]),
        "memory": "%dMi" % int(node["memory_mb"]),
        "pods": str(int(max_pods)),
        "nvidia.com/gpu": gpus,
    }
    labels = dict(node.get("labels") or {})
    labels.update(
        {
            "type": "kwok",
            "kubernetes.io/hostname": node["name"],
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.product": node["gpu_product"],
            "nvidia.com/gpu.count": gpus,
            "topology.kubernetes.io/zone": node["zone"],
            POOL_LABEL: node["pool"],
            RACK_LABEL: node["rack"],
            BLOCK_LABEL: node["block"],
        }
    )
    manifest: Dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": node["name"],
            "annotations": {KWOK_ANNOTATION[0]: KWOK_ANNOTATION[1]},
            "labels": labels,
        },
        "status": {"capacity": dict(resources), "allocatable": dict(resources)},
    }
    taints = [dict(t) for t in node.get("taints") or []]
    if taints:
        manifest["spec"] = {"taints": taints}
    return manifest
