# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The ``GpuHealthy`` node condition: the fault a node reports, and the one codec to and from it. Pure.

The health agent writes the condition; the remediation, the drills, ``fleet_status`` and the
node-condition event source read it. People read the message's first line, as before::

    fatal, RESTART_BM: GPU 3 (GPU-8c1e..., 0000:3b:00.0): XID 79 GPU has fallen off the bus -> RESTART_BM

Machines read its last line, ``gpufleet.io/fault: {...}`` (compact JSON, ``v`` its format's
version), through ``decode``; nothing parses the prose. A condition without that line (an agent
of a release before 0.6.0, during an upgrade) is read from its first line's head alone (verdict and
action), with string operations, and carries no device or XIDs.

The event source plugin (extensions/eda/plugins/event_source/node_condition.py) is loaded on its
own and keeps a copy of ``decode``; tests/unit/plugins/module_utils/health/test_gpu_condition.py holds
the two equal.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional, Tuple

from ansible_collections.gpufleet.resilience.plugins.module_utils.health.model import (
    ACTION_ORDER,
    NO_ACTION,
    HealthVerdict,
)

CONDITION_TYPE = "GpuHealthy"
HEALTHY_REASON = "GpusHealthy"
UNKNOWN_REASON = "NvmlUnavailable"
DATA_PREFIX = "gpufleet.io/fault: "
FORMAT_VERSION = 1
UNHEALTHY = ("fatal", "degraded")
VERDICTS = ("healthy", *UNHEALTHY, "unknown")


@dataclass(frozen=True)
class NodeFault:
    """What a node's ``GpuHealthy`` condition says: the verdict, the catalog action, the reason
    (``Xid79``, ``EccDoubleBit``, ...), the people's summary, and the worst fault's device and
    the XIDs behind the verdict when the agent knows them."""

    verdict: str  # VERDICTS
    action: str  # health.model.ACTION_ORDER
    reason: str
    summary: str = ""
    xids: Tuple[int, ...] = ()
    gpu_index: Optional[int] = None
    gpu_uuid: Optional[str] = None
    pci_bus_id: Optional[str] = None

    @property
    def unhealthy(self) -> bool:
        return self.verdict in UNHEALTHY

    def as_dict(self) -> Dict[str, Any]:
        return {"verdict": self.verdict, "action": self.action, "reason": self.reason, "summary": self.summary,
                "xids": list(self.xids), "gpu_index": self.gpu_index, "gpu_uuid": self.gpu_uuid,
                "pci_bus_id": self.pci_bus_id}


def find(node: Mapping[str, Any], condition_type: str = CONDITION_TYPE) -> Optional[Dict[str, Any]]:
    """The condition of that type in a Node as the API serves it (a dict, camelCase keys), or None."""
    for condition in (node.get("status") or {}).get("conditions") or []:
        if isinstance(condition, Mapping) and condition.get("type") == condition_type:
            return dict(condition)
    return None


def from_verdict(verdict: HealthVerdict, reason: str, gpu_count: int) -> NodeFault:
    """The node fault of an agent's verdict; ``reason`` is the condition's (agent.node_state)."""
    if verdict.state == "healthy":
        return NodeFault("healthy", NO_ACTION, reason, "%d GPU%s healthy" % (gpu_count, "" if gpu_count == 1 else "s"))
    effective = [fault for fault in verdict.faults if fault.effective]
    worst = effective[0] if effective else None
    xids = tuple(dict.fromkeys(fault.xid for fault in effective if fault.xid is not None))
    return NodeFault(
        verdict=verdict.state, action=verdict.action, reason=reason, summary=verdict.reason, xids=xids,
        gpu_index=worst.gpu_index if worst else None, gpu_uuid=worst.gpu_uuid if worst else None,
        pci_bus_id=worst.pci_bus_id if worst else None,
    )


def unknown(error: Optional[str]) -> NodeFault:
    return NodeFault("unknown", NO_ACTION, UNKNOWN_REASON,
                     "the agent cannot read its GPUs: %s" % (error or "NVML unavailable"))


def encode(fault: NodeFault) -> Dict[str, str]:
    """The condition's ``type``, ``status``, ``reason`` and ``message`` for ``fault``."""
    if fault.verdict not in VERDICTS:
        raise ValueError("verdict must be one of %s, not %r" % (", ".join(VERDICTS), fault.verdict))
    status = {"healthy": "True", "unknown": "Unknown"}.get(fault.verdict, "False")
    if not fault.unhealthy:
        return {"type": CONDITION_TYPE, "status": status, "reason": fault.reason, "message": fault.summary}
    data = {"v": FORMAT_VERSION, "verdict": fault.verdict, "action": fault.action, "xids": list(fault.xids),
            "gpu": fault.gpu_index, "uuid": fault.gpu_uuid, "pci": fault.pci_bus_id}
    # One line for people (the summary's own line breaks would push the data off kubectl's view).
    first = " ".join(("%s, %s: %s" % (fault.verdict, fault.action, fault.summary)).split())
    return {"type": CONDITION_TYPE, "status": status, "reason": fault.reason,
            "message": first + "\n" + DATA_PREFIX + json.dumps(data, separators=(",", ":"), sort_keys=True)}


def _optional_int(value: Any) -> Optional[int]:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _optional_text(value: Any) -> Optional[str]:
    return value if isinstance(value, str) and value else None


def decode(condition: Optional[Mapping[str, Any]]) -> Optional[NodeFault]:
    """The fault a ``GpuHealthy`` condition (as the API serves it) reports; None when there is no
    condition, or a ``False`` one whose message is not ours (no data line, no verdict head)."""
    if not condition:
        return None
    status, reason = condition.get("status"), str(condition.get("reason") or "")
    message = str(condition.get("message") or "")
    if status == "True":
        return NodeFault("healthy", NO_ACTION, reason or HEALTHY_REASON, message)
    if status != "False":
        return NodeFault("unknown", NO_ACTION, reason or UNKNOWN_REASON, message)
    lines = message.split("\n")
    head, _sep, summary = lines[0].partition(": ")
    verdict, _sep, action = head.partition(", ")
    data = None
    if lines[-1].startswith(DATA_PREFIX):
        with contextlib.suppress(ValueError):  # not our data line: read as if there were none
            data = json.loads(lines[-1][len(DATA_PREFIX):])
    if isinstance(data, dict) and data.get("v") == FORMAT_VERSION:
        verdict, action = data.get("verdict"), data.get("action")
        xids = tuple(code for code in data.get("xids") or () if _optional_int(code) is not None)
        device = (_optional_int(data.get("gpu")), _optional_text(data.get("uuid")), _optional_text(data.get("pci")))
    else:
        xids, device = (), (None, None, None)
    if verdict not in UNHEALTHY or action not in ACTION_ORDER:
        return None
    return NodeFault(verdict, action, reason or "GpuFault", summary, xids, *device)
