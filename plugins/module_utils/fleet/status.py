# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""One row per GPU node, joining what Kubernetes and Slurm say about it (pure)."""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Mapping, Optional

from ansible_collections.gpufleet.resilience.plugins.module_utils.health import gpu_condition
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.parse_sinfo import parse_sinfo_nodes


def _ready(node: Mapping[str, Any]) -> bool:
    return (gpu_condition.find(node, "Ready") or {}).get("status") == "True"


def agent_verdict(node: Mapping[str, Any]) -> Dict[str, Any]:
    """The health agent's verdict from the node's GpuHealthy condition (docs/agent.md), read
    through the agent's codec (health/gpu_condition.py): ``healthy``, ``fatal``, ``degraded``,
    ``unknown`` (the agent cannot read its GPUs), ``unhealthy`` (``False`` with a message that is
    not the agent's); None without the condition (no agent)."""
    condition = gpu_condition.find(node)
    if condition is None:
        return dict(agent=None, agent_reason=None, agent_message=None)
    fault = gpu_condition.decode(condition)
    message = condition.get("message") or ""
    return dict(agent=fault.verdict if fault is not None else "unhealthy", agent_reason=condition.get("reason"),
                agent_message=message.split("\n", 1)[0])


def _gpus(node: Mapping[str, Any]) -> Any:
    value = (node.get("status", {}).get("allocatable") or {}).get("nvidia.com/gpu")
    return int(value) if value is not None and str(value).isdigit() else value


def _slurm_states(slurm_nodes: Iterable[Any]) -> Dict[str, Dict[str, Any]]:
    """Name -> state, reason, GPUs from slurm_node_info's ``nodes`` or from sinfo lines."""
    slurm_nodes = list(slurm_nodes)
    if all(isinstance(node, Mapping) for node in slurm_nodes):
        # long_state is sinfo's %T spelling (idle, drained, down*): the rows read the same
        # whichever source they came from.
        return {node["name"]: dict(state=node.get("long_state"), reason=node.get("reason"), gpus=node.get("gpus"))
                for node in slurm_nodes}
    return {name: dict(state=state.state, reason=state.reason, gpus=state.gpus)
            for name, state in parse_sinfo_nodes(str(line) for line in slurm_nodes).items()}


def fleet_status(k8s_nodes: Iterable[Mapping[str, Any]], slurm_nodes: Iterable[Any],
                 gpu_health: Optional[Mapping[str, Mapping[str, Any]]] = None) -> List[Dict[str, Any]]:
    """Rows sorted by node name; ``gpu_health`` maps a node to a gpu_health result.

    ``slurm_nodes`` is the ``nodes`` list of slurm_node_info, or (as before it existed) lines of
    ``sinfo --Node --noheader --format=%N|%T|%G|%E``.
    """
    slurm = _slurm_states(slurm_nodes)
    rows: Dict[str, Dict[str, Any]] = {}
    for node in k8s_nodes:
        meta = node.get("metadata", {})
        labels = meta.get("labels") or {}
        rows[meta["name"]] = dict(
            name=meta["name"], pool=labels.get("gpufleet.io/pool"), rack=labels.get("gpufleet.io/rack"),
            k8s="Ready" if _ready(node) else "NotReady", k8s_ready=_ready(node),
            cordoned=bool(node.get("spec", {}).get("unschedulable")), gpus=_gpus(node),
            slurm_state=None, slurm_reason=None, slurm_gpus=None, **agent_verdict(node),
        )
    for name, state in slurm.items():
        row = rows.setdefault(name, dict(name=name, pool=None, rack=None, k8s="absent", k8s_ready=False,
                                         cordoned=False, gpus=None, agent=None, agent_reason=None,
                                         agent_message=None))
        row.update(slurm_state=state["state"], slurm_reason=state["reason"], slurm_gpus=state["gpus"])
    for name, health in (gpu_health or {}).items():
        if name in rows:
            rows[name].update(health=health.get("verdict"), health_reason=health.get("reason"),
                              gpus_seen=len(health.get("gpus") or []))
    return [rows[name] for name in sorted(rows)]


TABLE_COLUMNS = (("NODE", "name", 12), ("K8S", "k8s", 9), ("CORDONED", "cordoned", 9), ("SLURM", "slurm_state", 12),
                 ("GPUS", "gpus_seen", 5), ("HEALTH", "health", 9), ("AGENT", "agent", 9), ("REASON", "reason", 0))


def fixed_width(columns: Iterable[Any], rows: Iterable[Mapping[str, Any]]) -> List[str]:
    """A header of the columns' titles, then one line per row: (title, key, width) each, the last
    column (width 0) as long as it is."""
    columns = list(columns)
    lines = ["".join(title.ljust(width) if width else title for title, _key, width in columns).rstrip()]
    lines.extend("".join(table_cell(row.get(key), width) for _title, key, width in columns).rstrip() for row in rows)
    return lines


def fleet_table(rows: Iterable[Mapping[str, Any]]) -> List[str]:
    """Fixed-width lines for a terminal: a header, then one line per node."""
    shown = []
    for row in rows:
        # The Slurm reason says why a node is out; else the agent's (or the check's) when unhealthy.
        unhealthy = row.get("health") not in (None, "healthy")
        agent_unhealthy = row.get("agent") not in (None, "healthy")
        reason = (row.get("slurm_reason") or (row.get("agent_message") if agent_unhealthy else "")
                  or (row.get("health_reason") if unhealthy else ""))
        shown.append(dict(row, reason=reason or "", cordoned="yes" if row.get("cordoned") else "no"))
    return fixed_width(TABLE_COLUMNS, shown)


def table_cell(value: Any, width: int) -> str:
    """One fixed-width cell: "-" for nothing; the last column (width 0) as it is."""
    if not width:
        return "" if value is None else str(value)
    return ("-" if value is None else str(value)).ljust(width)
