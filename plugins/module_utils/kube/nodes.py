# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Labels and taints on Nodes, written so that a concurrent change is never lost.

A Node's ``spec.taints`` is one list: a read-modify-write replaces it whole, so a taint that
another writer (a cordon, the health agent, the remediation loop) adds between our read and
our write would vanish. Every write here sends the ``metadata.resourceVersion`` it read; the
API server refuses a stale one with 409 Conflict, and we read again and recompute. (The
``kubernetes.core.k8s_taint`` module has exactly that lost-update flaw.)

What a pool manages is recorded on the node (annotations below), so a label or taint removed
from the inventory is removed from the node too, and nobody else's is ever touched.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.client import (
    ApiException,
    KubeError,
    TransportError,
    api_error,
    api_failure,
    unreachable,
)

MANAGED_LABELS = "gpufleet.io/managed-labels"
MANAGED_TAINTS = "gpufleet.io/managed-taints"
MERGE_PATCH = "application/merge-patch+json"
DEFAULT_ATTEMPTS = 8


@dataclass(frozen=True)
class NodeEdit:
    """What one node needs: the patch to send (empty when it is as wanted) and a diff."""

    name: str
    patch: Dict[str, Any]
    before: Dict[str, Any]
    after: Dict[str, Any]

    @property
    def changed(self) -> bool:
        return bool(self.patch)


@dataclass
class NodeResult:
    name: str
    changed: bool
    attempts: int
    before: Dict[str, Any] = field(default_factory=dict)
    after: Dict[str, Any] = field(default_factory=dict)


def taint_key(taint: Mapping[str, Any]) -> Tuple[str, str]:
    """A taint's identity on a node: key and effect (the API server refuses two with the same)."""
    return (taint.get("key") or "", taint.get("effect") or "")


def clean_taint(taint: Mapping[str, Any]) -> Dict[str, Any]:
    # The API returns timeAdded for NoExecute taints and null values; compare what matters.
    cleaned = {"key": taint.get("key"), "effect": taint.get("effect")}
    if taint.get("value"):
        cleaned["value"] = taint["value"]
    if taint.get("timeAdded"):
        cleaned["timeAdded"] = taint["timeAdded"]
    return cleaned


def plan_node_edit(node: Mapping[str, Any], labels: Mapping[str, str], taints: Sequence[Mapping[str, Any]]) -> NodeEdit:
    """Pure: the merge patch that gives ``node`` (a Node as a dict) these labels and taints.

    Labels and taints this collection set before but no longer wants are removed; every other
    label and taint stays as it is. The patch carries the resourceVersion it was computed from.
    """
    meta = node.get("metadata") or {}
    name = meta.get("name") or ""
    current_labels = dict(meta.get("labels") or {})
    annotations = dict(meta.get("annotations") or {})
    current_taints = [clean_taint(t) for t in (node.get("spec") or {}).get("taints") or []]

    old_labels = set(json.loads(annotations.get(MANAGED_LABELS, "[]")))
    old_taints = {tuple(k) for k in json.loads(annotations.get(MANAGED_TAINTS, "[]"))}
    want_taints = [clean_taint(t) for t in taints]
    want_keys = {taint_key(t) for t in want_taints}

    label_patch: Dict[str, Optional[str]] = {
        key: value for key, value in labels.items() if current_labels.get(key) != value
    }
    for key in sorted(old_labels - set(labels)):
        if key in current_labels:
            label_patch[key] = None

    by_key = {taint_key(t): t for t in want_taints}
    new_taints: List[Dict[str, Any]] = []
    for taint in current_taints:
        key = taint_key(taint)
        if key in want_keys:
            wanted = dict(by_key.pop(key))
            if taint.get("timeAdded"):
                wanted.setdefault("timeAdded", taint["timeAdded"])
            new_taints.append(wanted)
        elif key not in old_taints:
            new_taints.append(taint)  # someone else's: keep it exactly
    new_taints.extend(t for t in want_taints if taint_key(t) in by_key)

    managed_labels = json.dumps(sorted(labels))
    managed_taints = json.dumps(sorted([list(k) for k in want_keys]))
    annotation_patch = {
        key: value
        for key, value in ((MANAGED_LABELS, managed_labels), (MANAGED_TAINTS, managed_taints))
        if annotations.get(key) != value
    }

    patch: Dict[str, Any] = {}
    if label_patch or annotation_patch:
        patch["metadata"] = {}
        if label_patch:
            patch["metadata"]["labels"] = label_patch
        if annotation_patch:
            patch["metadata"]["annotations"] = annotation_patch
    if new_taints != current_taints:
        patch["spec"] = {"taints": new_taints}
    if patch:
        patch.setdefault("metadata", {})["resourceVersion"] = meta.get("resourceVersion")

    after_labels = {k: v for k, v in {**current_labels, **label_patch}.items() if v is not None}
    return NodeEdit(
        name=name,
        patch=patch,
        before={"labels": current_labels, "taints": current_taints},
        after={"labels": after_labels, "taints": new_taints},
    )


class NodeWriter:
    """Reads and patches Nodes through a CoreV1Api; the retry on 409 lives here."""

    def __init__(self, core_v1: Any, attempts: int = DEFAULT_ATTEMPTS) -> None:
        self.core_v1 = core_v1
        self.attempts = attempts

    def list_nodes(self, selector: str) -> List[Dict[str, Any]]:
        what = "list nodes with selector %r" % selector
        try:
            listed = self.core_v1.list_node(label_selector=selector)
        except ApiException as exc:
            raise api_error(exc, what) from exc
        except TransportError as exc:
            raise unreachable(exc, what) from exc
        return [self._as_dict(node) for node in listed.items]

    def read_node(self, name: str) -> Dict[str, Any]:
        try:
            return self._as_dict(self.core_v1.read_node(name))
        except ApiException as exc:
            if getattr(exc, "status", None) == 404:
                raise KubeError(
                    "node %s not found: the cluster has no Node of that name (HTTP 404)" % name, 404
                ) from exc
            raise api_error(exc, "read node %s" % name) from exc
        except TransportError as exc:
            raise unreachable(exc, "read node %s" % name) from exc

    def _as_dict(self, node: Any) -> Dict[str, Any]:
        return node if isinstance(node, dict) else self.core_v1.api_client.sanitize_for_serialization(node)

    def apply(
        self,
        name: str,
        labels: Mapping[str, str],
        taints: Sequence[Mapping[str, Any]],
        check_mode: bool = False,
        dry_run: bool = False,
        on_conflict: Optional[Callable[[str, int], None]] = None,
    ) -> NodeResult:
        """Give node ``name`` these labels and taints; retried while another writer races us."""
        return self.edit(name, lambda node: plan_node_edit(node, labels, taints), check_mode, dry_run, on_conflict)

    def edit(
        self,
        name: str,
        plan: Callable[[Dict[str, Any]], NodeEdit],
        check_mode: bool = False,
        dry_run: bool = False,
        on_conflict: Optional[Callable[[str, int], None]] = None,
    ) -> NodeResult:
        """Read node ``name``, ``plan`` its patch, send it; on 409 read again and plan again.

        ``plan`` is pure: it gets the Node as a dict and returns a NodeEdit whose patch carries
        the resourceVersion it was computed from (or is empty). ``dry_run`` sends the patch with
        the API server's own dry run (validated, not stored); ``check_mode`` sends nothing.
        """
        for attempt in range(1, self.attempts + 1):
            edit = plan(self.read_node(name))
            if not edit.changed or check_mode:
                return NodeResult(name, edit.changed, attempt, edit.before, edit.after)
            try:
                self.core_v1.patch_node(name, edit.patch, dry_run="All" if dry_run else None, _content_type=MERGE_PATCH)
            except ApiException as exc:
                if getattr(exc, "status", None) == 409:
                    if on_conflict is not None:
                        on_conflict(name, attempt)
                    continue
                raise api_failure(exc, "patch node %s" % name) from exc
            except TransportError as exc:
                raise unreachable(exc, "patch node %s" % name) from exc
            return NodeResult(name, True, attempt, edit.before, edit.after)
        raise KubeError(
            "node %s changed under us %d times in a row; giving up without writing" % (name, self.attempts), 409
        )
