# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The circuit breaker: at most ``max_percent`` of the GPU nodes and at most ``max_nodes`` nodes
taken out of service within ``window_s``. Pure; ``remediation/store.py`` keeps the state in a
ConfigMap and applies ``take_slot`` with a conflict-safe write, so two concurrent remediations
can never both take the last slot.

Peers: NVSentinel stops at 50 % cordoned in 5 minutes with an absolute cap (and then blocks new
cordons); Cluster API's MachineHealthCheck ``maxUnhealthy``; medik8s' ``minHealthy``. Our
defaults are stricter (25 %, 10 nodes, 10 minutes): a fleet-wide false positive - the
repeated-XID-45 bug that flagged 77 nodes over 11 racks after one job crash - must stop at a
handful of nodes. 25 % rather than 20 % so that an 8-node pool can lose two nodes in one window
(two GPUs failing within minutes is common on a busy fleet: a node dies every few hours) before
the breaker stops it; 50 % would let a false positive take half a pool.

Once it trips it stays open, whatever the window, until a human resets it
(``playbooks/remediation-reset.yml``): a storm is a reason to look, not to wait. While it is open a
refused fatal node is still fenced in Slurm (plan ``BREAKER_OPEN``; ``fence_when_open``), so no new
job lands on a dead GPU; that fence is reversible and takes no slot. The nodes refused stay listed
(``refused``, one entry per node) until a remediation of that node is granted a slot: after a
reset, ``remediation-reset.yml`` names them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.fields import check_number


@dataclass(frozen=True)
class BreakerPolicy:
    max_percent: float = 25.0
    max_nodes: int = 10
    window_s: float = 600.0
    enabled: bool = True
    fence_when_open: bool = True  # a refused remediation still fences the node in Slurm

    @classmethod
    def from_dict(cls, data: Optional[Mapping[str, Any]], field_name: str = "remediation_breaker") -> "BreakerPolicy":
        data = dict(data or {})
        known = {"max_percent", "max_nodes", "window_s", "enabled", "fence_when_open"}
        unknown = sorted(set(data) - known)
        if unknown:
            raise FieldError(
                "%s.%s" % (field_name, unknown[0]), "is not a setting; settings: %s" % ", ".join(sorted(known))
            )
        policy = cls(**data)
        # NaN compares false to everything: a window of NaN seconds held no slot, so the breaker
        # granted every remediation. Every number goes through the strict layer (finite only).
        check_number(policy.max_percent, field_name + ".max_percent", above=0, maximum=100)
        if isinstance(policy.max_nodes, bool) or not isinstance(policy.max_nodes, int) or policy.max_nodes < 1:
            raise FieldError(field_name + ".max_nodes", "must be an integer >= 1")
        check_number(policy.window_s, field_name + ".window_s", above=0)
        for flag in ("enabled", "fence_when_open"):
            if not isinstance(getattr(policy, flag), bool):
                raise FieldError("%s.%s" % (field_name, flag),
                                 "must be true or false, got %r" % (getattr(policy, flag),))
        return replace(policy, max_percent=float(policy.max_percent), window_s=float(policy.window_s))

    def cap(self, gpu_nodes: int) -> int:
        """Nodes that may be out within the window: never below 1, or a small fleet could never heal."""
        return max(1, min(self.max_nodes, math.floor(gpu_nodes * self.max_percent / 100.0)))


@dataclass(frozen=True)
class BreakerState:
    slots: Tuple[Dict[str, Any], ...] = ()  # {"node", "id", "at"}
    tripped: bool = False
    tripped_at: Optional[float] = None
    tripped_why: str = ""
    refused: Tuple[Dict[str, Any], ...] = field(default=())  # {"node", "id", "at"} refused since the trip

    def as_data(self) -> Dict[str, Any]:
        return {
            "slots": list(self.slots),
            "tripped": self.tripped,
            "tripped_at": self.tripped_at,
            "tripped_why": self.tripped_why,
            "refused": list(self.refused),
        }

    @classmethod
    def from_data(cls, data: Optional[Mapping[str, Any]]) -> "BreakerState":
        data = data or {}
        return cls(
            slots=tuple(data.get("slots") or ()),
            tripped=bool(data.get("tripped")),
            tripped_at=data.get("tripped_at"),
            tripped_why=str(data.get("tripped_why") or ""),
            refused=tuple(data.get("refused") or ()),
        )


@dataclass(frozen=True)
class SlotDecision:
    granted: bool
    tripped_now: bool  # this request tripped it: fire the alert
    why: str
    cap: int
    in_window: int  # nodes holding a slot inside the window, after this decision


def with_refusal(refused: Tuple[Dict[str, Any], ...], node: str, remediation_id: str,
                 now: float) -> Tuple[Dict[str, Any], ...]:
    """The refused list with this refusal: one entry per node (its latest), at most 50."""
    kept = tuple(entry for entry in refused if entry.get("node") != node)
    return (*kept, {"node": node, "id": remediation_id, "at": now})[-50:]


def without_node(refused: Tuple[Dict[str, Any], ...], node: str) -> Tuple[Dict[str, Any], ...]:
    return tuple(entry for entry in refused if entry.get("node") != node)


def in_window(state: BreakerState, now: float, policy: BreakerPolicy) -> List[Dict[str, Any]]:
    return [slot for slot in state.slots if float(slot.get("at") or 0) > now - policy.window_s]


def take_slot(
    state: BreakerState, node: str, remediation_id: str, now: float, gpu_nodes: int, policy: BreakerPolicy
) -> Tuple[BreakerState, SlotDecision]:
    """Grant or refuse a slot to remediation ``remediation_id`` of ``node``; the new state to store."""
    cap = policy.cap(gpu_nodes)
    current = in_window(state, now, policy)
    if any(slot.get("id") == remediation_id for slot in state.slots):
        return state, SlotDecision(True, False, "slot already held (resumed remediation)", cap, len(current))
    if not policy.enabled:
        return state, SlotDecision(True, False, "the breaker is off", cap, len(current))
    if state.tripped:
        refused = with_refusal(state.refused, node, remediation_id, now)
        why = "the breaker is open since %s: %s" % (state.tripped_at, state.tripped_why)
        return BreakerState(tuple(current), True, state.tripped_at, state.tripped_why, refused), SlotDecision(
            False, False, why, cap, len(current)
        )
    # The cap counts nodes, not runs: a node remediated again inside the window (its fault came back,
    # and escalation may hold it) takes no second node out of service.
    taken = {slot.get("node") for slot in current}
    if node in taken:
        slots = (*tuple(current), {"node": node, "id": remediation_id, "at": now})
        return BreakerState(slots, False, None, "", without_node(state.refused, node)), SlotDecision(
            True, False, "%s already holds a slot in the window (%d of %d nodes)" % (node, len(taken), cap), cap,
            len(taken)
        )
    if len(taken) >= cap:
        why = "%d of %d GPU nodes already taken out within %gs (cap %d: %g%%, at most %d nodes)" % (
            len(taken),
            gpu_nodes,
            policy.window_s,
            cap,
            policy.max_percent,
            policy.max_nodes,
        )
        tripped = BreakerState(tuple(current), True, now, why, with_refusal(state.refused, node, remediation_id, now))
        return tripped, SlotDecision(False, True, why, cap, len(taken))
    slots = (*tuple(current), {"node": node, "id": remediation_id, "at": now})
    return BreakerState(slots, False, None, "", without_node(state.refused, node)), SlotDecision(
        True, False, "slot %d of %d" % (len(taken) + 1, cap), cap, len(taken) + 1
    )


def reset(state: BreakerState, clear_slots: bool = False, gone: Iterable[str] = ()) -> BreakerState:
    """Close a tripped breaker; with clear_slots the window starts empty too.

    The refused nodes stay listed: each waits for a remediation that is granted a slot (the reset
    playbook names them and takes them up), and a crash of that playbook forgets none of them. Only
    the ``gone`` ones leave the list: a node that no longer exists will never be granted a slot."""
    gone = set(gone)
    refused = tuple(entry for entry in state.refused if entry.get("node") not in gone)
    return BreakerState(() if clear_slots else state.slots, False, None, "", refused)
