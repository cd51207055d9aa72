# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Escalation: when a node goes to a human instead of another automatic remediation. Pure.

Two rules, as the peers ship them (docs/remediation.md): a node remediated ``max_remediations`` times
within ``window_days`` (one peer hands a node to a human after 5 in 7 days), and the same fault
coming back after a remediation that reset or rebooted for it (another counts two reboots for
one XID, then asks for hardware inspection). Either turns the plan into ``HOLD``.

Stalled jobs (``JOB_HANG``) have a rule of their own: a hang is the job's or the fabric's as often as
the node's, so one requeues the job and leaves the node alone, but a node on which more than
``max_job_hangs`` jobs stalled within ``window_days`` is the likely cause and is held (fenced,
quarantined, its jobs requeued, a human called). A ``JOB_HANG`` run counts for that rule alone: it
did nothing to the node.

The history is a list of ``{"id", "at", "reason", "action"}`` per node (kept in a ConfigMap, so it
outlives a Node object that replacement deletes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.fields import check_number
from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation.fault import JOB_STALLED_REASON

DAY = 86400.0
# Remediations that should have cured the fault: seeing it again afterwards means they did not.
CURING_ACTIONS = frozenset(("RESET_GPU", "DRAIN_AND_RESET", "RESTART_BM", "RESTART_VM", "RESTART_FM"))
# Plans that never count: nothing was done to the node.
NOT_COUNTED = frozenset(("IGNORE", "RESTART_APP", "BREAKER_OPEN", "JOB_HANG"))
SETTINGS = ("max_remediations", "window_days", "repeat_after_cure", "enabled", "max_job_hangs")


@dataclass(frozen=True)
class EscalationPolicy:
    max_remediations: int = 3
    window_days: float = 7.0
    repeat_after_cure: bool = True
    enabled: bool = True
    max_job_hangs: int = 2

    @classmethod
    def from_dict(
        cls, data: Optional[Mapping[str, Any]], field_name: str = "remediation_escalation"
    ) -> "EscalationPolicy":
        data = dict(data or {})
        unknown = sorted(set(data) - set(SETTINGS))
        if unknown:
            raise FieldError("%s.%s" % (field_name, unknown[0]), "is not a setting")
        policy = cls(**data)
        for count in ("max_remediations", "max_job_hangs"):
            value = getattr(policy, count)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise FieldError("%s.%s" % (field_name, count), "must be an integer >= 1")
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
    if reason == JOB_STALLED_REASON:
        hangs = _recent(history, since, remediation_id, lambda entry: entry.get("reason") == JOB_STALLED_REASON)
        return _over(len(hangs), policy.max_job_hangs, "stalled jobs on this node", policy,
                     ": the node is the likely cause") or EscalationDecision(False, "", len(hangs))
    earlier = _recent(history, since, remediation_id, lambda entry: entry.get("action") not in NOT_COUNTED)
    over = _over(len(earlier), policy.max_remediations, "remediations of this node", policy)
    if over is not None:
        return over
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


def _recent(history: Sequence[Mapping[str, Any]], since: float, remediation_id: str,
            counts: Callable[[Mapping[str, Any]], bool]) -> List[Mapping[str, Any]]:
    """The entries inside the window that ``counts``, the remediation being decided left out."""
    return [entry for entry in history
            if entry.get("id") != remediation_id and float(entry.get("at") or 0) >= since and counts(entry)]


def _over(earlier: int, limit: int, what: str, policy: EscalationPolicy, why: str = "") -> Optional[EscalationDecision]:
    """A hold when this one makes more than ``limit``; None otherwise."""
    if earlier + 1 <= limit:
        return None
    return EscalationDecision(
        True, "%d %s in %g days (limit %d)%s" % (earlier + 1, what, policy.window_days, limit, why), earlier)


def add_entry(
    history: Sequence[Mapping[str, Any]], entry: Mapping[str, Any], now: float, keep_days: float
) -> List[Dict[str, Any]]:
    """The history with ``entry`` (replacing one of the same id) and without entries older than keep_days."""
    since = now - keep_days * DAY
    kept = [dict(item) for item in history if item.get("id") != entry.get("id") and float(item.get("at") or 0) >= since]
    kept.append(dict(entry))
    return kept
