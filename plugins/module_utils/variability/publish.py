# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Publish variability classes to Slurm (Weight, features) and Kubernetes (label, annotation), and
take them back.

Order of a publish: the placement record first (what each node had, kept from the first publish,
so reruns never record our own values as "before"), then Slurm, then Kubernetes. A revert sets
the recorded Weight back, removes the class features (every other feature stays, including ones
added since), restores the recorded label and annotation, and only then removes the record: a
revert cut short can be run again.

Slurm keeps ``scontrol update``'s Weight and features only until ``scontrol reconfigure`` or a
slurmctld restart (measured on 22.05): rerunning the publish puts them back, and changes nothing
when they are still there.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence

from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.client import KubeError
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.nodes import NodeEdit, NodeWriter
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.client import SlurmClient
from ansible_collections.gpufleet.resilience.plugins.module_utils.variability import record
from ansible_collections.gpufleet.resilience.plugins.module_utils.variability.classes import (
    LABEL,
    SCORE_ANNOTATION,
    NodeClass,
    label_patch,
    slurm_differs,
    slurm_target,
)


class Publisher:
    """One run: a Slurm client and/or a NodeWriter (None: that side is not published)."""

    def __init__(self, state_dir: str, slurm: Optional[SlurmClient], kube: Optional[NodeWriter],
                 check_mode: bool = False) -> None:
        self.state_dir = state_dir
        self.slurm = slurm
        self.kube = kube
        self.check_mode = check_mode

    # -- reading what is there -----------------------------------------------------------------------
    def _slurm_nodes(self, names: Sequence[str]) -> Dict[str, Dict[str, Any]]:
        if self.slurm is None or not names:
            return {}
        return {name: node.as_dict() for name, node in self.slurm.nodes(names=list(names), with_jobs=False).items()}

    def _kube_node(self, name: str) -> Optional[Dict[str, Any]]:
        if self.kube is None:
            return None
        try:
            return self.kube.read_node(name)
        except KubeError as exc:
            if exc.status == 404:
                return None  # a Slurm-only node: nothing to label
            raise

    # -- publish -------------------------------------------------------------------------------------
    def publish(self, classes: Sequence[NodeClass], offsets: Mapping[str, int]) -> Dict[str, Any]:
        names = [item.node for item in classes]
        slurm_nodes = self._slurm_nodes(names)
        kube_nodes = {name: self._kube_node(name) for name in names}
        placement = record.load(self.state_dir, record.PLACEMENT)
        recorded = placement.setdefault("nodes", {})
        for name in names:
            if name in recorded:
                continue
            before: Dict[str, Any] = {}
            if name in slurm_nodes:
                node = slurm_nodes[name]
                before["slurm"] = {key: node.get(key) for key in ("weight", "features", "active_features")}
            kube_node = kube_nodes[name]
            if kube_node is not None:
                meta = kube_node.get("metadata") or {}
                before["kube"] = {"label": (meta.get("labels") or {}).get(LABEL),
                                  "score": (meta.get("annotations") or {}).get(SCORE_ANNOTATION)}
            recorded[name] = before
        if not self.check_mode:
            record.store(self.state_dir, record.PLACEMENT, placement)

        results = []
        for item in classes:
            before = recorded[item.node]
            result: Dict[str, Any] = {"node": item.node, "class": item.cls, "score": item.score}
            if item.node in slurm_nodes:
                base = (before.get("slurm") or {}).get("weight")
                target = slurm_target(slurm_nodes[item.node], base, item.cls, offsets)
                result["slurm"] = self._set_slurm(item.node, slurm_nodes[item.node], target)
            if kube_nodes[item.node] is not None:
                result["kube"] = self._set_kube(item.node, item.cls, "%.2f" % item.score)
            results.append(result)
        return {"nodes": results, "changed": any(_changed(result) for result in results)}

    # -- revert --------------------------------------------------------------------------------------
    def revert(self) -> Dict[str, Any]:
        placement = record.load(self.state_dir, record.PLACEMENT)
        recorded: Dict[str, Any] = placement.get("nodes") or {}
        slurm_names = [name for name, before in recorded.items() if "slurm" in before]
        slurm_nodes = self._slurm_nodes(slurm_names) if self.slurm is not None else {}
        results: List[Dict[str, Any]] = []
        for name, before in sorted(recorded.items()):
            result: Dict[str, Any] = {"node": name}
            if name in slurm_nodes:
                target = slurm_target(slurm_nodes[name], before["slurm"].get("weight"), None, {})
                result["slurm"] = self._set_slurm(name, slurm_nodes[name], target)
            if "kube" in before and self._kube_node(name) is not None:
                result["kube"] = self._set_kube(name, before["kube"].get("label"), before["kube"].get("score"))
            results.append(result)
        removed = False
        if not self.check_mode:
            removed = record.remove(self.state_dir, record.PLACEMENT)
        return {"nodes": results, "changed": removed or any(_changed(result) for result in results)}

    # -- writers -------------------------------------------------------------------------------------
    # Called only for nodes read through self.slurm / self.kube, so both are set here.
    def _set_slurm(self, name: str, node: Mapping[str, Any], target: Mapping[str, Any]) -> Dict[str, Any]:
        before = {key: node.get(key) for key in ("weight", "features", "active_features")}
        if not slurm_differs(node, target):
            return {"changed": False, "before": before, "after": before}
        command = self.slurm.set_node_placement(name, target["weight"], target["features"], target["active_features"])
        return {"changed": True, "before": before, "after": dict(target), "cmd": command.argv, "ran": command.ran}

    def _set_kube(self, name: str, label: Optional[str], score: Optional[str]) -> Dict[str, Any]:
        def plan(node: Dict[str, Any]) -> NodeEdit:
            meta = node.get("metadata") or {}
            before = {"label": (meta.get("labels") or {}).get(LABEL),
                      "score": (meta.get("annotations") or {}).get(SCORE_ANNOTATION)}
            return NodeEdit(name, label_patch(node, label, score), before, {"label": label, "score": score})

        done = self.kube.edit(name, plan, check_mode=self.check_mode)
        return {"changed": done.changed, "before": done.before, "after": done.after}


def _changed(result: Mapping[str, Any]) -> bool:
    return any((result.get(side) or {}).get("changed") for side in ("slurm", "kube"))
