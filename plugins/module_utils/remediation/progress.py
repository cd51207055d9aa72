# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The progress of one remediation: which phases are done, with their times and outcomes. Pure.

It is written after every phase (``store.py``), so a remediation killed at any point and run again
skips what is done and finishes the rest. Actions that cannot be undone or safely repeated write an
*intent* first (the job ids about to get SIGTERM): a rerun does not signal them again - at most once
- and goes on waiting for them.

A document::

    {"id": "r-20261130T031502-gpu-a-003-1a2b", "node": "gpu-a-003", "plan": {...}, "fault": {...},
     "trigger": {...}, "started_at": 1764472502.1, "holder": {...}, "dry_run": false,
     "phases": {"notify": {"start": ..., "end": ..., "outcome": {...}}, ...},
     "intents": {"jobs": ["41"]}, "stopped": null, "finished_at": null, "result": null}
"""

from __future__ import annotations

import copy
import datetime
import hashlib
import json
from typing import Any, Dict, List, Mapping, Optional

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.remediation_objects import finished
from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation.plans import PHASES, RemediationPlan

Progress = Dict[str, Any]
RESULTS = ("succeeded", "stopped", "failed", "refused")
# Plans whose end is a human's turn: they finish "stopped", not "succeeded".
HUMAN_PLANS = frozenset(("HOLD", "CONTACT_SUPPORT", "DECODE"))


def new_id(node: str, now: float, salt: str = "") -> str:
    stamp = datetime.datetime.fromtimestamp(now, tz=datetime.timezone.utc).strftime("%Y%m%dT%H%M%S")
    digest = hashlib.sha256(("%s|%r|%s" % (node, now, salt)).encode()).hexdigest()[:6]
    return "r-%s-%s-%s" % (stamp, node, digest)


def new_progress(
    remediation_id: str,
    node: str,
    plan: RemediationPlan,
    fault: Mapping[str, Any],
    trigger: Mapping[str, Any],
    now: float,
    holder: Mapping[str, Any],
    dry_run: bool = False,
    decisions: Optional[Mapping[str, Any]] = None,
) -> Progress:
    return {
        "id": remediation_id,
        "node": node,
        "plan": plan.as_dict(),
        "fault": dict(fault),
        "trigger": dict(trigger),
        "started_at": now,
        "holder": dict(holder),
        "dry_run": dry_run,
        "decisions": dict(decisions or {}),
        "phases": {},
        "intents": {},
        "stopped": None,
        "finished_at": None,
        "result": None,
    }


def plan_of(progress: Mapping[str, Any]) -> RemediationPlan:
    return RemediationPlan.from_dict(progress["plan"])


def resumed(progress: Mapping[str, Any], now: float) -> Progress:
    """Taken over by a new run: a failure is kept in ``failures`` and the remediation is open again."""
    updated = copy.deepcopy(dict(progress))
    updated.setdefault("resumed", []).append(now)
    if updated.get("result") == "failed":
        updated.setdefault("failures", []).append({"at": updated.get("finished_at"), "error": updated.get("error")})
        updated["finished_at"] = updated["result"] = updated["error"] = None
    return updated


def auto_result(progress: Mapping[str, Any]) -> str:
    plan = plan_of(progress)
    if plan.name == "BREAKER_OPEN":
        return "refused"
    if progress.get("stopped") or plan.name in HUMAN_PLANS:
        return "stopped"
    return "succeeded"


def pending(progress: Mapping[str, Any]) -> List[str]:
    """The plan's phases not done yet, in order."""
    done = progress.get("phases") or {}
    return [phase for phase in plan_of(progress).phases if phase not in done]


def last_end(progress: Mapping[str, Any]) -> float:
    ends = [float(entry.get("end") or 0) for entry in (progress.get("phases") or {}).values()]
    return max([*ends, float(progress.get("started_at") or 0)])


def mark_phase(
    progress: Mapping[str, Any], phase: str, outcome: Mapping[str, Any], now: float, stop: Optional[str] = None
) -> Progress:
    """``phase`` is done with ``outcome``; ``stop`` (a reason) skips every later phase but ``record``.

    A phase's start is the end of the one before it: the time in between is that phase's work.
    Marking a phase that is already done changes nothing (a rerun after a crash at that point).
    """
    if phase not in PHASES:
        raise FieldError("phase", "%r is not a phase; phases: %s" % (phase, ", ".join(PHASES)))
    plan = plan_of(progress)
    if phase not in plan.phases:
        raise FieldError("phase", "%r is not in plan %s (%s)" % (phase, plan.name, ", ".join(plan.phases)))
    updated = copy.deepcopy(dict(progress))
    phases = updated.setdefault("phases", {})
    if phase in phases:
        return updated
    phases[phase] = {"start": last_end(progress), "end": now, "outcome": dict(outcome)}
    if stop:
        updated["stopped"] = {"at_phase": phase, "why": stop}
        for later in plan.phases[plan.phases.index(phase) + 1 :]:
            if later != "record" and later not in phases:
                phases[later] = {"start": now, "end": now, "outcome": {"skipped": True, "why": stop}}
    return updated


def add_intent(progress: Mapping[str, Any], phase: str, intent: Any) -> Progress:
    updated = copy.deepcopy(dict(progress))
    updated.setdefault("intents", {})[phase] = intent
    return updated


def finish(progress: Mapping[str, Any], result: str, now: float, error: Optional[str] = None) -> Progress:
    if result == "auto":
        result = auto_result(progress)
    if result not in RESULTS:
        raise FieldError("result", "must be auto or one of %s, not %r" % (", ".join(RESULTS), result))
    updated = copy.deepcopy(dict(progress))
    if finished(updated):
        return updated
    updated["finished_at"] = now
    updated["result"] = result
    if error:
        updated["error"] = error
    return updated


def summary(progress: Mapping[str, Any]) -> str:
    """One line for the node annotation and the logs: ``r-...: RESTART_BM, at drain (5/9 done)``."""
    plan = plan_of(progress)
    done = [phase for phase in plan.phases if phase in (progress.get("phases") or {})]
    if progress.get("finished_at"):
        where = progress.get("result") or "finished"
    else:
        left = pending(progress)
        where = "at %s" % left[0] if left else "recording"
    return "%s: %s, %s (%d/%d done)" % (progress.get("id"), plan.name, where, len(done), len(plan.phases))


def annotation(progress: Mapping[str, Any]) -> str:
    """The node annotation ``gpufleet.io/remediation`` that people read, and the node_condition
    event source too (extensions/eda/plugins/event_source/node_condition.py): a record from
    before the condition's transition, or one unfinished or failed, leaves the episode
    unresolved there, and it is reported again."""
    return json.dumps(
        {
            "id": progress.get("id"),
            "started_at": progress.get("started_at"),
            "summary": summary(progress),
            "pending": pending(progress),
            "result": progress.get("result"),
        },
        sort_keys=True,
    )
