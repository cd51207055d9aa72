# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The names of the Kubernetes objects where the remediation keeps its state.

The remediation writes them (module_utils/remediation/store.py); the chaos drills read them (is
the breaker open, is a remediation under way) without depending on the remediation package, so
the names, and the one rule both need to read a progress record (``finished``), live here, below
both.
"""

from __future__ import annotations

import hashlib
from typing import Any, Mapping, Optional

PROGRESS_PREFIX = "gpufleet-remediation-"
BREAKER_NAME = PROGRESS_PREFIX + "breaker"
HISTORY_NAME = PROGRESS_PREFIX + "history"
# Per-node objects have a prefix of their own that no singleton name starts with: before 0.6.0 a
# node named "breaker" or "history" wrote its progress over the breaker or the escalation history.
NODE_PREFIX = PROGRESS_PREFIX + "node-"
SINGLETONS = (BREAKER_NAME, HISTORY_NAME)
PROGRESS_KEY = "progress"
ANNOTATION = "gpufleet.io/remediation"
# The taint a quarantine puts on the node by default (kube/quarantine.py); fleet status reads it.
QUARANTINE_TAINT = "gpufleet.io/gpu-unhealthy"
MAX_NAME = 253  # an object name is a DNS subdomain


def progress_name(node: str) -> str:
    """The ConfigMap that holds node ``node``'s remediation progress.

    A node name near the 253-character cap is cut and given a digest of the whole name, so two
    long names never share an object."""
    name = NODE_PREFIX + node
    if len(name) <= MAX_NAME:
        return name
    digest = hashlib.sha256(node.encode()).hexdigest()[:16]
    return name[:MAX_NAME - len(digest) - 1].rstrip(".-") + "-" + digest


def legacy_progress_name(node: str) -> Optional[str]:
    """Where releases before 0.6.0 kept the progress of ``node``, read once to move it (None: never
    a node's: the singletons' names)."""
    name = PROGRESS_PREFIX + node
    return None if name in SINGLETONS or len(name) > MAX_NAME else name


def progress_node(configmap_name: str) -> str:
    """The node a progress ConfigMap is about (cut for a name near the cap: the record's ``node``
    says it whole); '' for the breaker, the history and other objects."""
    if configmap_name.startswith(NODE_PREFIX):
        return configmap_name[len(NODE_PREFIX):]
    if not configmap_name.startswith(PROGRESS_PREFIX) or configmap_name in SINGLETONS:
        return ""
    return configmap_name[len(PROGRESS_PREFIX):]  # a record from before 0.6.0


def finished(progress: Optional[Mapping[str, Any]]) -> bool:
    """Done for good: a failed remediation is not, it is resumed by the next run."""
    return bool(progress and progress.get("finished_at") and progress.get("result") != "failed")
