# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The names of the Kubernetes objects where the remediation keeps its state.

The remediation writes them (module_utils/remediation/store.py); the chaos drills read them (is
the breaker open, is a remediation under way) without depending on the remediation package, so
the names, and the one rule both need to read a progress record (``finished``), live here, below
both.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

PROGRESS_PREFIX = "gpufleet-remediation-"
BREAKER_NAME = PROGRESS_PREFIX + "breaker"
HISTORY_NAME = PROGRESS_PREFIX + "history"
PROGRESS_KEY = "progress"
ANNOTATION = "gpufleet.io/remediation"


def progress_name(node: str) -> str:
    """The ConfigMap that holds node ``node``'s remediation progress."""
    return PROGRESS_PREFIX + node


def progress_node(configmap_name: str) -> str:
    """The node a progress ConfigMap is about; '' for the breaker, the history and other objects."""
    if not configmap_name.startswith(PROGRESS_PREFIX) or configmap_name in (BREAKER_NAME, HISTORY_NAME):
        return ""
    return configmap_name[len(PROGRESS_PREFIX):]


def finished(progress: Optional[Mapping[str, Any]]) -> bool:
    """Done for good: a failed remediation is not, it is resumed by the next run."""
    return bool(progress and progress.get("finished_at") and progress.get("result") != "failed")
