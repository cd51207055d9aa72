# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The ``GpuHealthy`` node condition from a verdict. Pure.

``True`` only when the node is healthy; ``False`` for degraded and fatal alike (a degraded GPU is
not a healthy one), with the verdict and action at the head of the message so a reader - human,
rulebook or the remediation source plugin - tells them apart without parsing the rest:
``fatal, RESTART_BM: GPU 3 (GPU-..., 0000:3b:00.0): XID 79 ...``. ``Unknown`` when the agent
cannot sense its GPUs (NVML unavailable).
"""

from __future__ import annotations

from typing import Optional

from ansible_collections.gpufleet.resilience.plugins.module_utils.agent.node_state import verdict_reason
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.model import HealthVerdict
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.node_status import NodeCondition

CONDITION_TYPE = "GpuHealthy"
UNKNOWN_REASON = "NvmlUnavailable"


def health_condition(verdict: HealthVerdict, gpu_count: int) -> NodeCondition:
    if verdict.state == "healthy":
        return NodeCondition(CONDITION_TYPE, "True", verdict_reason(verdict),
                             "%d GPU%s healthy" % (gpu_count, "" if gpu_count == 1 else "s"))
    return NodeCondition(CONDITION_TYPE, "False", verdict_reason(verdict),
                         "%s, %s: %s" % (verdict.state, verdict.action, verdict.reason))


def unknown_condition(error: Optional[str]) -> NodeCondition:
    return NodeCondition(CONDITION_TYPE, "Unknown", UNKNOWN_REASON,
                         "the agent cannot read its GPUs: %s" % (error or "NVML unavailable"))
