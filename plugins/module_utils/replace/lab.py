# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Provider ``lab``: a spare of the failed node's pool comes online, then the failed node goes out.

The spare comes first, so the pool is never short of a node longer than the spare's boot. Its
Kubernetes Node carries ``gpufleet.io/replaces=<failed node>`` (and the remediation id) from the
moment it is created: a rerun after a crash finds the same spare by it, and two replacements
running at once cannot both take one spare (the second create gets 409 and moves on).

``restore`` is the rollback: the replaced node comes back (healthy GPUs, as after a repair) and
its replacement goes back to being a spare.

``retire`` takes a node out with nothing in its place: a pool that shrinks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.lab.spares import (
    REMEDIATION_ID_ANNOTATION,
    REPLACES_ANNOTATION,
    LabNodeError,
    LabNodes,
    SpareTaken,
    forget_replacement,
    pick_spare,
    record_replacement,
)


@dataclass
class LabOutcome:
    changed: bool
    replacement: Optional[str]
    retired: Optional[str]
    actions: List[str] = field(default_factory=list)
    before: Dict[str, str] = field(default_factory=dict)
    after: Dict[str, str] = field(default_factory=dict)


def _service(nodes: LabNodes, *names: str) -> Dict[str, str]:
    return {name: "in service" if nodes.in_service(name) else "out of service" for name in names}


def _check_spare(nodes: LabNodes, name: str, spare: str) -> None:
    recipe = nodes.recipe(spare, "spare")
    if spare == name:
        raise FieldError("spare", "must be another node than %s" % name)
    pool = nodes.recipe(name).pool
    if recipe.pool != pool:
        raise FieldError("spare", "%s is in pool %s, not in %s's pool %s" % (spare, recipe.pool, name, pool))


def replace(nodes: LabNodes, name: str, spare: Optional[str] = None, remediation_id: Optional[str] = None,
            boot_delay: float = 0.0, check_mode: bool = False, fence_reason: Optional[str] = None) -> LabOutcome:
    """Bring a spare online in place of ``name`` (drained with ``fence_reason`` before it registers,
    when given), then take ``name`` out of service."""
    nodes.recipe(name)
    if spare:
        _check_spare(nodes, name, spare)
    existing = nodes.replacement_of(name)
    if spare and existing and existing != spare:
        raise FieldError("spare", "%s is already replaced by %s" % (name, existing))
    old_in_service = nodes.in_service(name)
    chosen = spare or existing
    if chosen is None and not old_in_service:
        raise FieldError("name", "%s is not in service (no Kubernetes node, no slurmd) and no node replaces it: "
                         "nothing to replace" % name)
    if spare and spare != existing and nodes.in_service(spare):
        raise FieldError("spare", "%s is in service, not spare capacity" % spare)
    if old_in_service:
        nodes.check_no_jobs(name)
    annotations = {REPLACES_ANNOTATION: name}
    if remediation_id:
        annotations[REMEDIATION_ID_ANNOTATION] = remediation_id
    taken: List[str] = []
    actions: List[str] = []
    while True:
        if chosen is None:
            chosen = pick_spare(nodes.recipes, name, nodes.in_service, taken)
            if chosen is None:
                pool = nodes.recipe(name).pool
                spares = [n for n, r in nodes.recipes.items() if r.pool == pool and r.spare]
                raise LabNodeError("pool %s has no spare left for %s: %s" % (
                    pool, name, "its spares %s are all in service" % ", ".join(spares) if spares
                    else "it has none (spares: 0)"))
        before = _service(nodes, name, chosen)
        try:
            actions = nodes.activate(chosen, annotations, boot_delay, check_mode, field_name="spare",
                                     fence_reason=fence_reason)
        except SpareTaken:
            if spare:  # the one asked for went to another replacement meanwhile
                raise
            taken.append(chosen)
            chosen = None
            continue
        break
    actions += nodes.retire(name, check_mode)
    # The record one-click-slurm.yml keeps the replacement by (not an action: the fleet is as it was).
    record_replacement(nodes.lab_dir, name, chosen, nodes.recipe(name).pool, check_mode)
    after = {name: "out of service", chosen: "in service"}
    return LabOutcome(changed=bool(actions), replacement=chosen, retired=name, actions=actions, before=before,
                      after=after)


def restore(nodes: LabNodes, name: str, spare: Optional[str] = None, check_mode: bool = False) -> LabOutcome:
    """Undo a replacement: ``name`` back in service, its replacement (or ``spare``) out again."""
    nodes.recipe(name)
    if spare:
        _check_spare(nodes, name, spare)
    replacement = spare or nodes.replacement_of(name)
    if replacement is None:
        if nodes.in_service(name):
            forget_replacement(nodes.lab_dir, name, check_mode)
            state = _service(nodes, name)
            return LabOutcome(changed=False, replacement=name, retired=None, before=state, after=state)
        raise FieldError("name", "no node carries %s=%s, and %s is out of service: give the node to take out "
                         "in spare" % (REPLACES_ANNOTATION, name, name))
    before = _service(nodes, name, replacement)
    if nodes.in_service(replacement):
        nodes.check_no_jobs(replacement)
    actions = nodes.activate(name, None, 0.0, check_mode)
    actions += nodes.retire(replacement, check_mode, field_name="spare")
    forget_replacement(nodes.lab_dir, name, check_mode)
    after = {name: "in service", replacement: "out of service"}
    return LabOutcome(changed=bool(actions), replacement=name, retired=replacement, actions=actions, before=before,
                      after=after)


def retire(nodes: LabNodes, name: str, check_mode: bool = False) -> LabOutcome:
    """Take ``name`` out of service, no spare in its place; nothing to do when it is out already."""
    nodes.recipe(name)
    before = _service(nodes, name)
    if before[name] == "in service":
        nodes.check_no_jobs(name)
    actions = nodes.retire(name, check_mode)
    return LabOutcome(changed=bool(actions), replacement=None, retired=name, actions=actions, before=before,
                      after={name: "out of service"})


def describe(outcome: LabOutcome) -> Dict[str, Any]:
    return dict(changed=outcome.changed, replacement=outcome.replacement, retired=outcome.retired,
                actions=outcome.actions)
