# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The ``GpuHealthy`` node condition from a verdict. Pure.

``True`` only when the node is healthy; ``False`` for degraded and fatal alike (a degraded GPU is
not a healthy one); ``Unknown`` when the agent cannot sense its GPUs (NVML unavailable). The
message is written by the one codec (health/gpu_condition.py): a line for people with the verdict
and action at its head, ``fatal, RESTART_BM: GPU 3 (GPU-..., 0000:3b:00.0): XID 79 ...``, and the
same fault as data on the last line, which the remediation, the drills, ``fleet_status`` and the
event source read through that codec.
"""

from __future__ import annotations

from typing import Optional

from ansible_collections.gpufleet.resilience.plugins.module_utils.agent.node_state import verdict_reason
from ansible_collections.gpufleet.resilience.plugins.module_utils.health import gpu_condition
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.model import HealthVerdict
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.node_status import NodeCondition


def _condition(fault: gpu_condition.NodeFault) -> NodeCondition:
    encoded = gpu_condition.encode(fault)
    return NodeCondition(encoded["type"], encoded["status"], encoded["reason"], encoded["message"])


def health_condition(verdict: HealthVerdict, gpu_count: int) -> NodeCondition:
    return _condition(gpu_condition.from_verdict(verdict, verdict_reason(verdict), gpu_count))


def unknown_condition(error: Optional[str]) -> NodeCondition:
    return _condition(gpu_condition.unknown(error))
