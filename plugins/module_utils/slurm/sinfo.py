# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Pure parser of ``sinfo --Node --noheader --format=%N|%T|%G|%E`` output.

``%T`` is the long state (``idle``, ``mixed``, ``down*``, ``drained``), ``%G``
the GRES (``gpu:8``), ``%E`` the reason, which may itself hold ``|``: it is
last so a split with a limit keeps it whole. ``--Node`` prints a node once per
partition; the first line wins.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, Iterable, Optional

SINFO_NODE_FORMAT = "%N|%T|%G|%E"
_GPU_GRES = re.compile(r"(?:^|,)gpu(?::[^:,()]+)?:(\d+)")


@dataclass(frozen=True)
class SlurmNodeState:
    name: str
    state: str  # lower case, with Slurm's suffix flags: "*" not responding, "~" powered off, "#" powering up, ...
    reason: Optional[str]
    gpus: Optional[int]

    @property
    def base_state(self) -> str:
        return self.state.rstrip("*~#!%$@^-")


def parse_gpu_count(gres: str) -> Optional[int]:
    match = _GPU_GRES.search(gres or "")
    return int(match.group(1)) if match else None


def parse_sinfo_nodes(lines: Iterable[str]) -> Dict[str, SlurmNodeState]:
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
