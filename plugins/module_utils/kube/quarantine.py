# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Quarantine of a Kubernetes node: cordon, taint and a state annotation, and its exact undo.

The annotation ``gpufleet.io/quarantine`` is the record of what we did, so that the rollback
undoes that and nothing else: a node that was cordoned before us stays cordoned, a taint that
was there before us stays. It is written in the same merge patch as the cordon and the taint,
so the node never carries one without the other. Every write carries the resourceVersion it
was computed from (``NodeWriter.edit``): a taint or cordon another writer adds meanwhile makes
the API server answer 409, and the patch is computed again from what is there now.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Dict, List, Mapping, Optional

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.fields import (
    check_label_key,
    check_label_value,
    check_node_name,
    check_text,
    optional_text,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.nodes import (
    NodeEdit,
    NodeWriter,
    clean_taint,
    taint_key,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.remediation_objects import QUARANTINE_TAINT

QUARANTINE_ANNOTATION = "gpufleet.io/quarantine"
DEFAULT_TAINT_KEY = QUARANTINE_TAINT
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
OURS = "gpufleet"  # we cordoned / tainted the node
ALREADY = "already"  # it was so before us: the rollback leaves it


@dataclass(frozen=True)
class QuarantineSpec:
    """What a quarantine puts on a node."""

    taint_key: str = DEFAULT_TAINT_KEY
    taint_value: str = ""
    taint_effect: str = "NoSchedule"
    reason: Optional[str] = None
    remediation_id: Optional[str] = None

    @property
    def taint(self) -> Dict[str, Any]:
        return clean_taint({"key": self.taint_key, "value": self.taint_value, "effect": self.taint_effect})


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def read_record(node: Mapping[str, Any]) -> Optional[Dict[str, Any]]:
    """The quarantine annotation of ``node`` as a dict; None when the node carries none.

    An annotation that is not a JSON object (written by hand) reads as ``{"raw": text}``: the
    node counts as quarantined, and the rollback removes the annotation but, not knowing who
    cordoned or tainted the node, leaves cordon and taints.
    """
    text = ((node.get("metadata") or {}).get("annotations") or {}).get(QUARANTINE_ANNOTATION)
    if text is None:
        return None
    try:
        record = json.loads(text)
    except ValueError:
        record = None
    return record if isinstance(record, dict) else {"raw": text}


def _view(unschedulable: bool, taints: List[Dict[str, Any]], record: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    return {"unschedulable": unschedulable, "taints": taints, "quarantine": record}


def _patch(node: Mapping[str, Any], spec: Dict[str, Any], annotation: Any) -> Dict[str, Any]:
    patch: Dict[str, Any] = {"metadata": {"resourceVersion": (node.get("metadata") or {}).get("resourceVersion")}}
    if annotation is not False:
        patch["metadata"]["annotations"] = {QUARANTINE_ANNOTATION: annotation}
    if spec:
        patch["spec"] = spec
    return patch


def plan_quarantine(node: Mapping[str, Any], want: QuarantineSpec, now: datetime) -> NodeEdit:
    """Pure: the merge patch that quarantines ``node`` (a Node as a dict); empty when it already is.

    ``cordoned_by`` and ``tainted_by`` say whether the cordon and the taint are ours
    (``gpufleet``) or were there before (``already``); ``since`` is kept from the first quarantine.
    """
    meta = node.get("metadata") or {}
    unschedulable = bool((node.get("spec") or {}).get("unschedulable"))
    taints = [clean_taint(t) for t in (node.get("spec") or {}).get("taints") or []]
    old = read_record(node)
    ours = taint_key(want.taint)
    present = [t for t in taints if taint_key(t) == ours]

    record: Dict[str, Any] = {
        "reason": want.reason if want.reason is not None else (old or {}).get("reason"),
        "remediation_id": want.remediation_id if want.remediation_id is not None else (old or {}).get("remediation_id"),
        "since": (old or {}).get("since") or rfc3339(now),
        "cordoned_by": (old or {}).get("cordoned_by", ALREADY) if unschedulable else OURS,
        "tainted_by": (old or {}).get("tainted_by", ALREADY) if present else OURS,
        "taint": want.taint,
    }
    new_taints = list(taints)
    if not present:
        new_taints.append(want.taint)
    elif record["tainted_by"] == OURS and present[0] != want.taint:
        # Our own taint with another value: ours to change (timeAdded kept, as the API server would).
        fixed = dict(want.taint)
        if present[0].get("timeAdded"):
            fixed["timeAdded"] = present[0]["timeAdded"]
        new_taints = [fixed if taint_key(t) == ours else t for t in taints]
    if present and record["tainted_by"] == ALREADY:
        record["taint"] = present[0]

    spec: Dict[str, Any] = {}
    if not unschedulable:
        spec["unschedulable"] = True
    if new_taints != taints:
        spec["taints"] = new_taints
    annotation: Any = False if old == record else json.dumps(record, sort_keys=True, separators=(",", ":"))
    patch = _patch(node, spec, annotation) if spec or annotation is not False else {}
    return NodeEdit(
        name=meta.get("name") or "",
        patch=patch,
        before=_view(unschedulable, taints, old),
        after=_view(True, new_taints, record),
    )


def plan_release(node: Mapping[str, Any], want: QuarantineSpec) -> NodeEdit:
    """Pure: the merge patch that undoes our quarantine of ``node``; empty when it has none.

    Only what the record says we did is undone: the cordon when ``cordoned_by`` is ours, the
    taint (key and effect as recorded) when ``tainted_by`` is ours. Every other taint, and a
    cordon someone else made, stays.
    """
    meta = node.get("metadata") or {}
    unschedulable = bool((node.get("spec") or {}).get("unschedulable"))
    taints = [clean_taint(t) for t in (node.get("spec") or {}).get("taints") or []]
    old = read_record(node)
    if old is None:
        view = _view(unschedulable, taints, None)
        return NodeEdit(name=meta.get("name") or "", patch={}, before=view, after=view)

    spec: Dict[str, Any] = {}
    new_taints = taints
    if old.get("tainted_by") == OURS:
        ours = taint_key(old.get("taint") or want.taint)
        new_taints = [t for t in taints if taint_key(t) != ours]
        if new_taints != taints:
            # A merge patch replaces the list whole; null, not [], when none is left, as before us.
            spec["taints"] = new_taints or None
    after_unschedulable = unschedulable
    if old.get("cordoned_by") == OURS and unschedulable:
        spec["unschedulable"] = None  # absent, as on a node never cordoned
        after_unschedulable = False
    return NodeEdit(
        name=meta.get("name") or "",
        patch=_patch(node, spec, None),
        before=_view(unschedulable, taints, old),
        after=_view(after_unschedulable, new_taints, None),
    )


def check_spec(name: str, state: str, want: QuarantineSpec) -> None:
    """Bad input fails before any call, naming the option."""
    check_node_name(name, "name")
    if state not in ("present", "absent"):
        raise FieldError("state", "must be present or absent, got %r" % (state,))
    check_label_key(want.taint_key, "taint_key")
    check_label_value(want.taint_value, "taint_value")
    if want.reason is not None:
        check_text(want.reason, "reason", lines=True)  # kept as JSON in an annotation
    optional_text(want.remediation_id, "remediation_id", 128)
    if want.taint_effect not in TAINT_EFFECTS:
        raise FieldError("taint_effect", "must be one of %s, got %r" % (", ".join(TAINT_EFFECTS), want.taint_effect))


def quarantine_node(
    writer: NodeWriter,
    name: str,
    state: str = "present",
    want: Optional[QuarantineSpec] = None,
    check_mode: bool = False,
    now: Callable[[], datetime] = lambda: datetime.now(timezone.utc),
) -> Dict[str, Any]:
    """Quarantine node ``name`` (``state=present``) or undo our quarantine (``absent``).

    Check mode sends the patch with the API server's dry run: validated, never stored.
    Returns the module's result: changed, node, quarantine, attempts, and before/after views.
    """
    want = want or QuarantineSpec()
    check_spec(name, state, want)
    if state == "present":

        def plan(node: Dict[str, Any]) -> NodeEdit:
            return plan_quarantine(node, want, now())
    else:

        def plan(node: Dict[str, Any]) -> NodeEdit:
            return plan_release(node, want)

    result = writer.edit(name, plan, dry_run=check_mode)
    after = result.after
    return {
        "changed": result.changed,
        "attempts": result.attempts,
        "node": {"name": name, "unschedulable": after["unschedulable"], "taints": after["taints"]},
        "quarantine": after["quarantine"],
        "before": result.before,
        "after": after,
    }
