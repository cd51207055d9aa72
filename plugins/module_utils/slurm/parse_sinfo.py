# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Pure parsers of sinfo output.

- ``sinfo --json``: 22.05 (v0.0.38) prints one object per node under ``nodes``, the layout
  ``scontrol show node --json`` has later; 24.11 (v0.0.40+) prints groups of nodes under
  ``sinfo``, one per partition and set of identical nodes. Both become ``SlurmNode``.
- ``sinfo --Node --noheader --format=%N|%T|%G|%E`` (``SINFO_NODE_FORMAT``): the lines the
  ``fleet_status`` filter has always taken. ``%E``, the reason, may itself hold ``|``: it is
  last, so a split with a limit keeps it whole. ``--Node`` prints a node once per partition;
  the first line wins.
- A table with a header whose last column is REASON (``sinfo -N -o '%N %t %G %f %w %E'``).

sinfo's ``--long`` table cuts the reason at 20 characters, which is why the client never reads it.

Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Dict, Iterable, Mapping, Optional

from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.errors import SlurmParseError
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.model import (
    SlurmNode,
    gpu_count,
    null,
    split_list,
    split_state,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.parse_scontrol import (
    JsonDoc,
    epoch_to_iso,
    json_number,
    json_state,
    load_json,
    node_from_json,
)

SINFO_NODE_FORMAT = "%N|%T|%G|%E"


@dataclass(frozen=True)
class SlurmNodeState:
    """One line of ``SINFO_NODE_FORMAT``: the state as sinfo spells it."""

    name: str
    state: str  # lower case, with Slurm's suffix flags: "*" not responding, "~" powered off, "#" powering up, ...
    reason: Optional[str]
    gpus: Optional[int]

    @property
    def base_state(self) -> str:
        return self.state.rstrip("*~#!%$@^-")


def parse_gpu_count(gres: str) -> Optional[int]:
    return gpu_count(gres)


def parse_sinfo_nodes(lines: Iterable[str]) -> Dict[str, SlurmNodeState]:
    """Lines of ``SINFO_NODE_FORMAT``; lines that are not four fields are skipped."""
    nodes: Dict[str, SlurmNodeState] = {}
    for line in lines:
        parts = line.strip().split("|", 3)
        if len(parts) < 4 or not parts[0] or parts[0] in nodes:
            continue
        name, state, gres, reason = parts
        nodes[name] = SlurmNodeState(
            name=name, state=state.lower(), gpus=parse_gpu_count(gres),
            reason=None if reason in ("", "none", "(null)") else reason,
        )
    return nodes


def parse_sinfo_json(doc: JsonDoc) -> Dict[str, SlurmNode]:
    """``sinfo --json`` of 22.05 (``nodes``) or 24.11 (``sinfo`` groups) -> name: SlurmNode."""
    data = load_json(doc, "sinfo --json")
    if "nodes" in data:
        return {node.name: node for node in (node_from_json(obj) for obj in data.get("nodes") or [])}
    if "sinfo" not in data:
        raise SlurmParseError("sinfo --json", "neither 'nodes' nor 'sinfo' in the document", str(list(data))[:200])
    nodes: Dict[str, SlurmNode] = {}
    for group in data.get("sinfo") or []:
        for name in ((group.get("nodes") or {}).get("nodes") or []):
            node = _node_from_group(name, group)
            if name in nodes:
                # The same node in another partition: one node, every partition.
                node = _add_partitions(nodes[name], node.partitions)
            nodes[name] = node
    return nodes


def _node_from_group(name: str, group: Mapping[str, Any]) -> SlurmNode:
    state, flags = json_state((group.get("node") or {}).get("state"))
    reason = group.get("reason") or {}
    features = group.get("features") or {}
    partition = null((group.get("partition") or {}).get("name"))
    return SlurmNode(
        name=name, state=state, flags=flags,
        # 26.05 (data parser v0.0.45) moved the user out of the reason, to the group's reason_set_by_user.
        reason=null(reason.get("description")),
        reason_user=null(reason.get("user")) or null(group.get("reason_set_by_user")),
        reason_time=epoch_to_iso(reason.get("time")),
        gres=null((group.get("gres") or {}).get("total")) or "",
        features=split_list(features.get("total")), active_features=split_list(features.get("active")),
        weight=_same(group.get("weight")), cpus=_same(group.get("cpus")),
        memory_mb=_same(group.get("memory")), partitions=(partition,) if partition else (),
    )


def _same(span: Any) -> Optional[int]:
    """A group's {minimum, maximum}: the value when every node has it, else None (not one node's)."""
    if not isinstance(span, Mapping):
        return None
    low, high = json_number(span.get("minimum")), json_number(span.get("maximum"))
    return low if low == high else None


# Header words of sinfo's table and the SlurmNode field each fills.
_COLUMNS = {
    "NODELIST": "name", "HOSTNAMES": "name", "STATE": "state", "GRES": "gres",
    "AVAIL_FEATURES": "features", "ACTIVE_FEATURES": "active_features", "WEIGHT": "weight",
    "CPUS": "cpus", "MEMORY": "memory_mb", "PARTITION": "partitions", "REASON": "reason",
}


def parse_sinfo_table(text: str) -> Dict[str, SlurmNode]:
    """A ``sinfo -N -o`` table with a header line, one node per line, REASON (if any) last."""
    lines = [line for line in (text or "").splitlines() if line.strip()]
    if not lines:
        return {}
    header = lines[0].split()
    unknown = [word for word in header if word not in _COLUMNS]
    if unknown or ("NODELIST" not in header and "HOSTNAMES" not in header):
        raise SlurmParseError("sinfo", "unknown columns %s" % unknown, lines[0])
    if "REASON" in header[:-1]:
        raise SlurmParseError("sinfo", "REASON must be the last column (it holds spaces)", lines[0])
    nodes: Dict[str, SlurmNode] = {}
    for line in lines[1:]:
        words = line.split(None, len(header) - 1)
        if len(words) < len(header):
            raise SlurmParseError("sinfo", "expected %d columns" % len(header), line)
        row = {_COLUMNS[column]: words[index].strip() for index, column in enumerate(header)}
        state, flags = split_state(row.get("state", ""))
        partitions = tuple(part.rstrip("*") for part in split_list(row.get("partitions")))
        node = SlurmNode(
            name=row["name"], state=state, flags=flags, reason=null(row.get("reason")),
            gres=null(row.get("gres")) or "", features=split_list(row.get("features")),
            active_features=split_list(row.get("active_features")), weight=_int(row.get("weight")),
            cpus=_int(row.get("cpus")), memory_mb=_int(row.get("memory_mb")), partitions=partitions,
        )
        if node.name in nodes:
            node = _add_partitions(nodes[node.name], partitions)
        nodes[node.name] = node
    return nodes


def _int(value: Optional[str]) -> Optional[int]:
    text = null(value)
    return int(text) if text is not None and text.isdigit() else None


def _add_partitions(node: SlurmNode, partitions: Iterable[str]) -> SlurmNode:
    return replace(node, partitions=node.partitions + tuple(part for part in partitions if part not in node.partitions))
