# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""A phase module records its own progress: the ``progress`` option of the modules a remediation runs.

The module that does a phase (slurm_node for fence, down and resume; slurm_jobs for jobs;
node_quarantine; node_opt_out; node_drain; gpu_reset; node_replace; remediation_record for notify
and hold) takes ``progress: {remediation_id, phase, ...}`` and, once its action is done, marks the
phase done with its outcome in the same module run. A phase used to cost two module runs (the
action, then remediation_progress): on a loaded controller each is 0.5-1 s, most of it Python
start-up and imports.

A crash between the action and the record leaves the phase pending: the rerun does the action again,
which every phase module makes idempotent (a drain already there is left, a job already signalled
is not signalled again: it is in the phase's recorded intent).
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional

from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation.plans import PHASES


def progress_argspec() -> Dict[str, Any]:
    """The ``progress`` option (doc fragment gpufleet.resilience.remediation_phase)."""
    return dict(
        progress=dict(
            type="dict",
            options=dict(
                remediation_id=dict(type="str", required=True),
                phase=dict(type="str", required=True, choices=list(PHASES)),
                outcome=dict(type="dict", default={}),
                namespace=dict(type="str", default="gpufleet-system"),
                kubeconfig=dict(type="path"),
                context=dict(type="str"),
            ),
        )
    )


def fence_outcome(result: Mapping[str, Any], reason: Optional[str]) -> Dict[str, Any]:
    """What the audit record keeps of a Slurm state change (fence, down, resume); the node's GPUs too,
    what the incident's cost counts once the node is gone (remediation/cost.py)."""
    return {"action": result.get("action") or "", "changed": bool(result.get("changed")), "reason": reason,
            "foreign_reason": result.get("foreign_reason"), "gpus": result.get("gpus")}


def _params(progress: Mapping[str, Any], node: str, **more: Any) -> Dict[str, Any]:
    params = {key: progress.get(key) for key in ("remediation_id", "phase", "namespace", "kubeconfig", "context")}
    params["node"] = node
    params.update(more)
    return params


def record(progress: Optional[Mapping[str, Any]], node: str, outcome: Mapping[str, Any], check_mode: bool,
           stop: Optional[str] = None) -> Optional[Dict[str, Any]]:
    """Mark ``progress['phase']`` done with ``outcome`` (the caller's ``progress.outcome`` added);
    nothing without ``progress``. Returns what remediation_progress would (progress, pending, summary)."""
    if not progress:
        return None
    # The import is here: a module used alone (no progress) never loads the remediation store.
    from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation.api import record_phase

    merged = dict(outcome)
    merged.update(progress.get("outcome") or {})
    return record_phase(_params(progress, node, outcome=merged, stop=stop), check_mode)


def record_intent(progress: Optional[Mapping[str, Any]], node: str, intent: List[str], check_mode: bool) -> None:
    """Record what the phase is about to act on (job ids), before it acts on them."""
    if progress and intent:
        from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation.api import record_phase

        record_phase(_params(progress, node, intent=list(intent)), check_mode)


def recorded_intent(progress: Optional[Mapping[str, Any]], node: str) -> List[str]:
    """The intent an earlier run of this phase recorded (ids it acted on), so a rerun skips them."""
    if not progress:
        return []
    from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation.api import store_from

    current = store_from(_params(progress, node), True).read_progress(node) or {}
    if current.get("id") != progress.get("remediation_id"):
        return []
    return [str(item) for item in (current.get("intents") or {}).get(progress["phase"]) or []]
