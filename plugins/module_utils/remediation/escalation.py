# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Escalation: when a node goes to a human instead of another automatic remediation. Pure.

Two rules, as the peers ship them (docs/remediation.md): a node remediated ``max_remediations`` times
within ``window_days`` (one peer hands a node to a human after 5 in 7 days), and the same fault
coming back after a remediation that reset or rebooted for it (another counts two reboots for
one XID, then asks for hardware inspection). Either turns the plan into ``HOLD``.

The history is a list of ``{"id", "at", "reason", "action"}`` per node (kept in a ConfigMap, so it
outlives a Node object that replacement deletes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.fields import check_number

DAY = 86400.0
# Remediations that should have cured the fault: seeing it again afterwards means they did not.
CURING_ACTIONS = frozenset(("RESET_GPU", "DRAIN_AND_RESET", "RESTART_BM", "RESTART_VM", "RESTART_FM"))
# Plans that never count: nothing was done to the node.
NOT_COUNTED = frozenset(("IGNORE", "RESTART_APP", "BREAKER_OPEN"))


@dataclass(frozen=True)
class EscalationPolicy:
    max_remediations: int = 3
    window_days: float = 7.0
    repeat_after_cure: bool = True
    enabled: bool = True

    @classmethod
    def from_dict(
        cls, data: Optional[Mapping[str, Any]], field_name: str = "remediation_escalation"
    ) -> "EscalationPolicy":
        data = dict(data or {})
        unknown = sorted(set(data) - {"max_remediations", "window_days", "repeat_after_cure", "enabled"})
        if unknown:
            raise FieldError("%s.%s" % (field_name, unknown[0]), "is not a setting")
        policy = cls(**data)
        if isinstance(policy.max_remediations, bool) or not isinstance(policy.max_remediations, int) \
                or policy.max_remediations < 1:
            raise FieldError(field_name + ".max_remediations", "must be an integer >= 1")
        check_number(policy.window_days, field_name + ".window_days", above=0)
        for flag in ("repeat_after_cure", "enabled"):
            if not isinstance(getattr(policy, flag), bool):
                raise FieldError("%s.%s" % (field_name, flag), "must be true or false")
        return policy


@dataclass(frozen=True)
class EscalationDecision:
    hold: bool
    why: str
    recent: int  # counted remediations of this node inside the window, this one excluded


def decide(
    history: Sequence[Mapping[str, Any]], now: float, reason: str, policy: EscalationPolicy, remediation_id: str = ""
) -> EscalationDecision:
    if not policy.enabled:
        return EscalationDecision(False, "escalation is off", 0)
    since = now - policy.window_days * DAY
    earlier = [
        entry
        for entry in history
        if entry.get("id") != remediation_id
        and entry.get("action") not in NOT_COUNTED
        and float(entry.get("at") or 0) >= since
    ]
    if len(earlier) + 1 > policy.max_remediations:
        return EscalationDecision(
            True,
            "%d remediations of this node in %g days (limit %d)"
            % (len(earlier) + 1, policy.window_days, policy.max_remediations),
            len(earlier),
        )
    if policy.repeat_after_cure:
        cured = [entry for entry in earlier if entry.get("reason") == reason and entry.get("action") in CURING_ACTIONS]
        if cured:
            last = cured[-1]
            return EscalationDecision(
                True,
                "%s came back after remediation %s (%s) of this node" % (reason, last.get("id"), last.get("action")),
                len(earlier),
            )
    return EscalationDecision(False, "", len(earlier))


def add_entry(
    history: Sequence[Mapping[str, Any]], entry: Mapping[str, Any], now: float, keep_days: float
) -> List[Dict[str, Any]]:
    """The history with ``entry`` (replacing one of the same id) and without entries older than keep_days."""
    since = now - keep_days * DAY
    kept = [dict(item) for item in history if item.get("id") != entry.get("id") and float(item.get("at") or 0) >= since]
    kept.append(dict(entry))
    return kept
