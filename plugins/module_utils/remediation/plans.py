# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Catalog action -> remediation plan: the phases to run, in order. Pure.

The table follows NVIDIA's XID catalog buckets (docs/health.md), proportionate to the fault:

* ``RESTART_BM``/``RESTART_VM`` (XID 79, 151...): the node is lost; fence and quarantine it first
  (Slurm DRAIN, cordon and taint, in the run that claims it), then notify, let its jobs checkpoint
  and requeue, take it out of Kubernetes and replace it from spare capacity; the replacement comes
  up fenced and is admitted to work once it has passed the same validation as a reset node.
* ``RESET_GPU``/``DRAIN_AND_RESET`` (XID 48, 48+63, 62, ...): fence and quarantine first, drain,
  reset the GPU, verify that it is healthy, validate it under load (a burn on the node itself,
  ``validation.py``), and put the node back in service.
* ``RESTART_FM`` (XID 45 alone): fence, restart the fabric manager, verify, validate, resume.
* ``RESTART_APP`` (XID 13, 31, ...): the application's fault, not the node's; notify (and requeue
  the node's jobs only where a site puts ``jobs`` in this plan).
* ``CONTACT_SUPPORT``/``DECODE``: fence and quarantine first, then hold the node for a human.
* ``IGNORE``: count it; nothing else.

Three plans are not catalog actions. ``JOB_HANG`` (a ``GpuJobStalled`` alert: a job whose progress
stopped, on a node that may be healthy): notify, requeue that job alone from its last checkpoint
(the jobs phase, scoped to the fault's ``job_ids``), record; nothing is done to the node, so it takes
no breaker slot. A node with too many stalled jobs goes to ``HOLD`` instead (escalation.py).
``HOLD`` (escalation: the node was remediated too often, or the
same fault came back after a reset or reboot) and ``BREAKER_OPEN`` (the circuit breaker refused:
notify, fence the node in Slurm so that no new work lands on a dead GPU, and record; nothing
more: no job is touched, nothing is cordoned, drained or replaced. The fence is reversible and
uses no breaker slot; ``remediation_breaker.fence_when_open: false`` leaves it out).

A site overrides any plan's phases from the inventory (``remediation_plans``); the override is
checked here and a bad one names its field.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError

# Every phase the playbook knows, in the only order they may run.
PHASES = (
    # Quarantine first: fence and quarantine run in the same module run as the claim and the
    # breaker's decision (remediation_start), so no new work lands on the node while the rest runs.
    "fence",  # Slurm DRAIN with our reason: no new work
    "quarantine",  # cordon + taint gpufleet.io/gpu-unhealthy:NoSchedule + state annotation
    "notify",  # webhook + Kubernetes Event: what happened, what will be done
    "jobs",  # SIGTERM, grace, requeue the requeueable, cancel the rest
    "down",  # Slurm DOWN with our reason (the node leaves the scheduler for good)
    "opt_out",  # node or pod labelled gpufleet.io/remediation=disabled: stop here, fenced
    "drain",  # evictions through the Eviction API, PDBs honoured
    "evidence",  # the evidence bundle: Slurm, Kubernetes, the agent's view, kernel log, bug report
    "reset_gpu",  # nvidia-smi -r (a state reset of the fake GPU in the lab)
    "restart_fm",  # restart the fabric manager
    "verify",  # the node's GpuHealthy condition is True again
    "validate",  # a burn on the node itself, reserved for it in Slurm; a failure holds the node
    "resume",  # undo quarantine and fence: the node is back in service
    "replace",  # retire the node, bring a spare online (lab | clusterapi | command), fenced
    "admit",  # validate the replacement in a reservation of it, then let it take work; a failure holds it
    "hold",  # label the node for a human and fire an alert
    "record",  # the audit record: one JSON line with the whole timeline
)
# Phases that change the node's state: a plan with one of these needs a circuit-breaker slot.
ACTING_PHASES = frozenset(("fence", "down", "quarantine", "drain", "reset_gpu", "restart_fm", "validate", "replace",
                           "admit", "hold"))
# What a refused remediation may still do while the breaker is open: stop new work (reversible).
BREAKER_OPEN_MAY = frozenset(("fence",))

# The evidence is collected before the node is reset, replaced or held: afterwards it is gone.
_REPLACE = ("fence", "quarantine", "notify", "jobs", "down", "opt_out", "drain", "evidence", "replace", "admit",
            "record")
_RESET = ("fence", "quarantine", "notify", "jobs", "opt_out", "drain", "evidence", "reset_gpu", "verify", "validate",
          "resume", "record")
_HOLD = ("fence", "quarantine", "notify", "jobs", "down", "evidence", "hold", "record")

DEFAULT_PLANS: Dict[str, Tuple[str, ...]] = {
    "RESTART_BM": _REPLACE,
    "RESTART_VM": _REPLACE,
    "RESET_GPU": _RESET,
    "DRAIN_AND_RESET": _RESET,
    "RESTART_FM": ("fence", "notify", "jobs", "evidence", "restart_fm", "verify", "validate", "resume", "record"),
    "RESTART_APP": ("notify", "record"),
    "CONTACT_SUPPORT": _HOLD,
    "DECODE": _HOLD,
    "IGNORE": ("record",),
    "HOLD": _HOLD,
    "BREAKER_OPEN": ("fence", "notify", "record"),
    "JOB_HANG": ("notify", "jobs", "record"),
}

# What the notification says will be done, per plan.
_RESET_INTENT = ("fence it, let its jobs checkpoint and requeue, drain it, reset the GPU, validate it under load "
                 "and put it back in service")
_REPLACE_INTENT = ("fence it in Slurm, let its jobs checkpoint and requeue, drain it and replace it from spare "
                   "capacity, the replacement validated before it takes work")
INTENTS = {
    "RESTART_BM": _REPLACE_INTENT,
    "RESTART_VM": _REPLACE_INTENT,
    "RESET_GPU": _RESET_INTENT,
    "DRAIN_AND_RESET": _RESET_INTENT,
    "RESTART_FM": "fence it, restart the fabric manager, validate it under load and put the node back in service",
    "RESTART_APP": "nothing on the node: the application's fault (its job restarts by itself)",
    "CONTACT_SUPPORT": "fence and quarantine it and hold it for a human (the catalog asks for support)",
    "DECODE": "fence and quarantine it and hold it for a human (the error needs its registers decoded)",
    "IGNORE": "nothing: the catalog says to ignore it",
    "HOLD": "fence and quarantine it and hold it for a human: it was remediated too often, or the fault came back",
    "BREAKER_OPEN": "fence it in Slurm only (no new work): the circuit breaker is open, too many nodes are in "
                    "remediation",
    "JOB_HANG": "requeue the stalled job from its last checkpoint; nothing is done to the node",
}


@dataclass(frozen=True)
class RemediationPlan:
    name: str  # the catalog action, HOLD, BREAKER_OPEN or JOB_HANG
    phases: Tuple[str, ...]
    why: str = ""  # why this plan and not the action's own (escalation, breaker)
    intent: str = ""
    notes: Tuple[str, ...] = field(default=())

    @property
    def acts(self) -> bool:
        return bool(ACTING_PHASES.intersection(self.phases))

    @property
    def needs_slot(self) -> bool:
        """A plan that acts takes a breaker slot; the breaker's own plan never does."""
        return self.acts and self.name != "BREAKER_OPEN"

    def as_dict(self) -> Dict[str, Any]:
        return {
            "name": self.name,
            "phases": list(self.phases),
            "why": self.why,
            "intent": self.intent,
            "notes": list(self.notes),
            "acts": self.acts,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "RemediationPlan":
        return cls(
            name=str(data["name"]),
            phases=tuple(data["phases"]),
            why=str(data.get("why") or ""),
            intent=str(data.get("intent") or ""),
            notes=tuple(data.get("notes") or ()),
        )


def check_overrides(
    overrides: Optional[Mapping[str, Any]], field_name: str = "remediation_plans"
) -> Dict[str, Tuple[str, ...]]:
    """The inventory's plan overrides, checked: known plans, known phases, in PHASES order, record last."""
    checked: Dict[str, Tuple[str, ...]] = {}
    if not overrides:
        return checked
    if not isinstance(overrides, Mapping):
        raise FieldError(field_name, "must be a dict of plan name -> list of phases")
    for name, phases in overrides.items():
        where = "%s.%s" % (field_name, name)
        if name not in DEFAULT_PLANS:
            raise FieldError(where, "is not a plan; known plans: %s" % ", ".join(sorted(DEFAULT_PLANS)))
        if isinstance(phases, str) or not isinstance(phases, Sequence) or not phases:
            raise FieldError(where, "must be a non-empty list of phases")
        for position, phase in enumerate(phases):
            if phase not in PHASES:
                raise FieldError(
                    "%s[%d]" % (where, position), "%r is not a phase; phases: %s" % (phase, ", ".join(PHASES))
                )
        if len(set(phases)) != len(phases):
            raise FieldError(where, "lists a phase twice")
        if list(phases) != sorted(phases, key=PHASES.index):
            raise FieldError(where, "phases must keep this order: %s" % ", ".join(PHASES))
        if phases[-1] != "record":
            raise FieldError(where, "must end with record: every remediation leaves its audit record")
        if name == "BREAKER_OPEN" and (ACTING_PHASES - BREAKER_OPEN_MAY).intersection(phases):
            raise FieldError(where, "may only fence the node in Slurm: the breaker is open")
        checked[name] = tuple(phases)
    return checked


def plan_for(action: str, overrides: Optional[Mapping[str, Sequence[str]]] = None, why: str = "",
             fence_when_open: bool = True) -> RemediationPlan:
    """The plan for a catalog action (or HOLD / BREAKER_OPEN / JOB_HANG), with the site's overrides applied.

    ``fence_when_open=False`` (``remediation_breaker.fence_when_open``) takes the fence out of
    ``BREAKER_OPEN``: a refused remediation then only notifies and records."""
    table = dict(DEFAULT_PLANS)
    table.update(check_overrides(overrides))
    if action not in table:
        raise FieldError("action", "%r has no plan; known: %s" % (action, ", ".join(sorted(table))))
    phases = table[action]
    intent = INTENTS.get(action, "")
    if action == "BREAKER_OPEN" and not fence_when_open:
        phases = tuple(phase for phase in phases if phase != "fence")
        intent = "nothing: the circuit breaker is open, too many nodes are in remediation"
    return RemediationPlan(name=action, phases=phases, why=why, intent=intent)


def phases_after(plan: RemediationPlan, phase: str) -> List[str]:
    phases = list(plan.phases)
    return phases[phases.index(phase) + 1 :] if phase in phases else []
