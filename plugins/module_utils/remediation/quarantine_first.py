# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Quarantine first: the plan's leading fence and quarantine, done by the run that claims the node.

remediation_start claims the node and takes the breaker's decision; with its ``fence`` option it
then, in the same module run, drains the node in Slurm with the remediation's reason (no new job
lands there) and cordons and taints it in Kubernetes (no new pod), recording each phase as it is
done. Everything else (notify, the opt-out check, the jobs' grace) follows. Only the phases at the
head of what is pending run here, so a resumed remediation whose fence is done does not fence again,
and the breaker's own plan (BREAKER_OPEN: Slurm fence only) never quarantines.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping

from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.nodes import NodeWriter
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.quarantine import (
    DEFAULT_TAINT_KEY,
    QuarantineSpec,
    quarantine_node,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation.phase_record import fence_outcome, record
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.fence import apply_node_state

FIRST_PHASES = ("fence", "quarantine")


def act_first(params: Mapping[str, Any], started: Dict[str, Any], check_mode: bool, slurm: Any,
              core: Any) -> Dict[str, Any]:
    """Run the pending fence and quarantine that head ``started['pending']``; return ``started``
    with ``pending`` and ``first`` (what was done, per phase) brought up to date.

    ``slurm`` is the module's Slurm client (its runner is in check mode when the module is);
    ``core`` the remediation store's CoreV1Api, reused for the quarantine's node edit."""
    node, remediation_id = params["node"], started["id"]
    fence = params.get("fence") or {}
    progress = {"remediation_id": remediation_id, "namespace": params.get("namespace") or "gpufleet-system",
                "kubeconfig": params.get("kubeconfig"), "context": params.get("context")}
    pending: List[str] = list(started.get("pending") or [])
    done: Dict[str, Any] = {}
    while pending and pending[0] in FIRST_PHASES:
        phase = pending[0]
        if phase == "fence":
            result = apply_node_state(slurm, node, "drain", started["slurm_reason"])
            outcome = fence_outcome(result, started["slurm_reason"])
        else:
            want = QuarantineSpec(taint_key=fence.get("taint_key") or DEFAULT_TAINT_KEY,
                                  reason=started["slurm_reason"], remediation_id=remediation_id)
            result = quarantine_node(NodeWriter(core), node, "present", want, check_mode=check_mode)
            outcome = {"changed": bool(result.get("changed"))}
        recorded = record(dict(progress, phase=phase), node, outcome, check_mode)
        done[phase] = outcome
        # In check mode nothing is written: the next phase is the one after this, all the same.
        pending = list(recorded["pending"]) if recorded and not check_mode else pending[1:]
    started["pending"] = pending
    started["first"] = done
    return started
