# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Where a remediation's state lives, and the decisions that need it: start (claim, plan,
escalation, breaker), record a phase, finish, and reset the breaker.

* **Progress**: ConfigMap ``gpufleet-remediation-node-<node>`` (key ``progress``), mirrored as the node
  annotation ``gpufleet.io/remediation`` for people (``kubectl get node -o yaml``). The ConfigMap is
  the truth because replacement deletes the Node object, and a rerun after a crash in the last
  phases must still find what was done.
* **Breaker**: ConfigMap ``gpufleet-remediation-breaker`` (key ``state``).
* **History** for escalation: ConfigMap ``gpufleet-remediation-history`` (one key per node).

All in one namespace (``gpufleet-system``), all changed with compare-and-swap
(``kube.configmap_store``). In check mode (a dry run) nothing is written: the answers are what a
real run would get now.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Tuple

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.health import gpu_condition
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.client import ApiException, KubeError, api_error
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.configmap_store import ConfigMapStore
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.remediation_objects import (
    ANNOTATION,
    BREAKER_NAME,
    HISTORY_NAME,
    PROGRESS_KEY,
    legacy_progress_name,
    progress_name,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation import breaker as breaker_rules
from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation import escalation as escalation_rules
from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation import holder as holders
from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation import neighbours as neighbour_rules
from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation import progress as progress_rules
from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation.fault import (
    JOB_HANG,
    Fault,
    fault_from_condition,
    fault_from_input,
    fault_from_trigger,
    slurm_reason,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation.plans import plan_for

REPLACES_ANNOTATION = "gpufleet.io/replaces"
HISTORY_KEEP_DAYS = 30.0
# A run that finds the first responder still fencing the node waits this long for its handoff
# (it takes a fraction of a second), instead of ending as a duplicate that nobody then continues.
HANDOFF_WAIT_S = 20.0
MERGE_PATCH = "application/merge-patch+json"


@dataclass(frozen=True)
class Policy:
    namespace: str = "gpufleet-system"
    pool_selector: str = "gpufleet.io/pool"
    plans: Mapping[str, Any] = field(default_factory=dict)
    breaker: breaker_rules.BreakerPolicy = field(default_factory=breaker_rules.BreakerPolicy)
    escalation: escalation_rules.EscalationPolicy = field(default_factory=escalation_rules.EscalationPolicy)
    lease_s: float = 1800.0
    # Marks of other remediators: a node that carries one is not ours to act on.
    neighbours: Tuple[neighbour_rules.Marker, ...] = neighbour_rules.KNOWN


class RemediationStore:
    def __init__(self, core_v1: Any, policy: Policy, write: bool = True) -> None:
        self.core_v1 = core_v1
        self.policy = policy
        self.write = write

    # -- reading ---------------------------------------------------------------------------------
    def read_node(self, node: str) -> Optional[Dict[str, Any]]:
        try:
            found = self.core_v1.read_node(node)
        except ApiException as exc:
            if getattr(exc, "status", None) == 404:
                return None
            raise api_error(exc, "read node %s" % node) from exc
        return self.core_v1.api_client.sanitize_for_serialization(found)

    def gpu_node_count(self) -> int:
        try:
            return len(self.core_v1.list_node(label_selector=self.policy.pool_selector).items)
        except ApiException as exc:
            raise api_error(exc, "list the GPU nodes (%s)" % self.policy.pool_selector) from exc

    def progress_store(self, node: str) -> ConfigMapStore:
        store = ConfigMapStore(self.core_v1, self.policy.namespace, progress_name(node))
        legacy_name = legacy_progress_name(node)
        if legacy_name is None or store.read()[1] is not None:
            return store
        # A remediation started before 0.6.0 kept its progress under the old name: move it (check
        # mode reads it there), so that an upgrade in the middle of a remediation loses nothing.
        legacy = ConfigMapStore(self.core_v1, self.policy.namespace, legacy_name)
        old, version = legacy.read()
        try:
            owner = json.loads(old[PROGRESS_KEY]).get("node") if PROGRESS_KEY in old else None
        except (ValueError, AttributeError):
            owner = None
        if version is None or owner != node:  # "gpufleet-remediation-node-x" may be node x's new object
            return store
        if not self.write:
            return legacy
        store.update(lambda current: (current or dict(old), None))
        # Emptied, not deleted: the remediation's identity may update ConfigMaps but never delete
        # them (docs/security.md), and an empty one is nobody's progress.
        legacy.update(lambda _data: ({}, None))
        return store

    def read_progress(self, node: str) -> Optional[Dict[str, Any]]:
        return self.progress_store(node).read_json(PROGRESS_KEY)

    # -- start -------------------------------------------------------------------------------------
    def start(
        self,
        node: str,
        trigger: Mapping[str, Any],
        now: float,
        fault_input: Optional[Mapping[str, Any]] = None,
        me: Optional[Mapping[str, Any]] = None,
    ) -> Dict[str, Any]:
        """Claim ``node`` for a remediation and decide its plan; or resume the one a crash left, or
        say why there is nothing to do (``skip``)."""
        me = dict(me or holders.current(now))
        existing = self.read_progress(node)
        node_obj = self.read_node(node)
        if existing and not progress_rules.finished(existing):
            return self._resume(node, existing, now, me)
        if node_obj is None and existing:
            return {"skip": "gone", "node": node, "id": existing.get("id"),
                    "message": "node %s is gone: remediation %s ended %s (%s)"
                    % (node, existing.get("id"), existing.get("result"), progress_rules.summary(existing))}
        if node_obj is None:
            raise KubeError("node %s: no such Node in the cluster (and no unfinished remediation of it)" % node, 404)

        condition = gpu_condition.find(node_obj)
        # The node's condition first: a node that is unhealthy too is remediated for that, and its plan
        # takes every job off it; else a stalled job's alert (JOB_HANG).
        fault = fault_from_input(fault_input, "remediation_fault") if fault_input else \
            fault_from_condition(condition) or fault_from_trigger(trigger, now=now)
        if fault is None:
            condition = condition or {}
            return {
                "skip": "healthy",
                "node": node,
                "message": "node %s reports GpuHealthy=%s (%s): nothing to remediate"
                % (node, condition.get("status", "absent"), condition.get("message", "no condition")),
            }
        # Another remediator is working on the node: two never act on one node. Nothing is claimed,
        # fenced or written; the fault stays, and a later trigger finds the node again.
        beside = neighbour_rules.found_on(node_obj, self.policy.neighbours)
        if beside:
            return {
                "skip": "neighbour",
                "node": node,
                "neighbours": beside,
                "message": "node %s is being worked on by another remediator (%s): not remediated. When that is done, "
                "or to act beside it, remove its mark or take it off remediation_neighbours"
                % (node, "; ".join(beside)),
            }

        remediation_id = progress_rules.new_id(node, now, str(me.get("pid")))
        history = self._history(node)
        escalation = escalation_rules.decide(history, now, fault.reason, self.policy.escalation, remediation_id)
        plan = plan_for(fault.action, self.policy.plans)
        # A plan that does nothing to the node is not escalated, but a stalled job's is: that rule
        # holds the node.
        if escalation.hold and (plan.acts or fault.action == JOB_HANG):
            plan = plan_for("HOLD", self.policy.plans, why=escalation.why)
        decisions: Dict[str, Any] = {
            "escalation": {"hold": escalation.hold, "why": escalation.why, "recent": escalation.recent}
        }
        progress = progress_rules.new_progress(
            remediation_id, node, plan, fault.as_dict(), trigger, now, me, dry_run=not self.write, decisions=decisions
        )

        def claim(data: Dict[str, str]):
            current = json.loads(data[PROGRESS_KEY]) if PROGRESS_KEY in data else None
            if current and not progress_rules.finished(current):
                return None, current  # another run claimed it between our read and our write
            return {PROGRESS_KEY: json.dumps(progress, sort_keys=True)}, None

        raced = self.progress_store(node).update(claim, write=self.write)
        if raced is not None:
            return self._resume(node, raced, now, me)
        started = self._with_breaker(node, progress, now, me, resumed=False)
        if self.write:
            # After the breaker's decision: a refused run is BREAKER_OPEN in the history, and
            # escalation never counts it as a remediation of the node.
            self._add_history(node, {"id": remediation_id, "at": now, "reason": fault.reason,
                                     "action": started["plan"]["name"]})
        return started

    def _resume(self, node: str, existing: Dict[str, Any], now: float, me: Mapping[str, Any]) -> Dict[str, Any]:
        existing = self._await_handoff(node, existing, now, me)
        if holders.alive(existing.get("holder"), now, self.policy.lease_s, me):
            who = existing.get("holder") or {}
            return {
                "skip": "duplicate",
                "node": node,
                "id": existing.get("id"),
                "message": "node %s is already in remediation %s (%s), run by PID %s on %s"
                % (node, existing.get("id"), progress_rules.summary(existing), who.get("pid"), who.get("host")),
            }

        def take_over(data: Dict[str, str]):
            current = json.loads(data[PROGRESS_KEY]) if PROGRESS_KEY in data else None
            if not current or current.get("id") != existing.get("id"):
                raise KubeError(
                    "remediation %s of %s changed while it was being resumed; run again" % (existing.get("id"), node)
                )
            if holders.alive(current.get("holder"), now, self.policy.lease_s, me):
                return None, None
            # Handed off by the first responder: the next run, not the resume of a crashed one.
            if not holders.is_handoff(current.get("holder")):
                current = progress_rules.resumed(current, now)
            current["holder"] = dict(me)
            return {PROGRESS_KEY: json.dumps(current, sort_keys=True)}, current

        taken = self.progress_store(node).update(take_over, write=self.write)
        if taken is None and self.write:
            return self._resume(node, self.read_progress(node) or existing, now, me)
        handed = holders.is_handoff(existing.get("holder"))
        return self._with_breaker(node, taken or existing, now, me, resumed=not handed, handed=handed)

    def _await_handoff(self, node: str, existing: Dict[str, Any], now: float,
                       me: Mapping[str, Any]) -> Dict[str, Any]:
        """The progress once the first responder holding it has handed it off (or HANDOFF_WAIT_S later)."""
        deadline = time.monotonic() + HANDOFF_WAIT_S
        while (self.write and holders.is_first_responder(existing.get("holder"))
               and holders.alive(existing.get("holder"), now, self.policy.lease_s, me)
               and time.monotonic() < deadline):
            time.sleep(0.1)
            existing = self.read_progress(node) or existing
        return existing

    def hand_off(self, node: str, remediation_id: str, now: float, by: str = holders.FIRST_RESPONDER) -> bool:
        """Let go of remediation ``remediation_id`` of ``node`` so that the next run takes it over at
        once; False when the node's progress is another remediation's (nothing written)."""

        def release(data: Dict[str, str]):
            current = json.loads(data[PROGRESS_KEY]) if PROGRESS_KEY in data else None
            if not current or current.get("id") != remediation_id:
                return None, False
            current["holder"] = holders.handed_off(by, now)
            return {PROGRESS_KEY: json.dumps(current, sort_keys=True)}, True

        return bool(self.progress_store(node).update(release, write=self.write))

    def _with_breaker(
        self, node: str, progress: Dict[str, Any], now: float, me: Mapping[str, Any], resumed: bool,
        handed: bool = False,
    ) -> Dict[str, Any]:
        plan = progress_rules.plan_of(progress)
        decision = None
        if plan.needs_slot:
            decision = self.take_slot(node, progress["id"], now)
            if not decision.granted:
                progress = self._replan(node, progress, "BREAKER_OPEN", decision.why)
                plan = progress_rules.plan_of(progress)
        progress.setdefault("decisions", {})["breaker"] = (
            None
            if decision is None
            else {
                "granted": decision.granted,
                "tripped_now": decision.tripped_now,
                "why": decision.why,
                "cap": decision.cap,
                "in_window": decision.in_window,
            }
        )
        self.mirror(node, progress)
        fault = Fault(
            **{k: v for k, v in progress["fault"].items() if k not in ("xids", "job_ids")},
            xids=tuple(progress["fault"].get("xids") or ()),
            job_ids=tuple(progress["fault"].get("job_ids") or ()),
        )
        return {
            "skip": None,
            "node": node,
            "id": progress["id"],
            "resumed": resumed,
            "plan": plan.as_dict(),
            "pending": progress_rules.pending(progress),
            "fault": progress["fault"],
            "intents": progress.get("intents") or {},
            "decisions": progress.get("decisions") or {},
            "slurm_reason": slurm_reason(fault, progress["id"]),
            # The spare a replace phase done before brought in (a run resumed after it): admit's node.
            "replacement": (((progress.get("phases") or {}).get("replace") or {}).get("outcome") or {}).get(
                "replacement"),
            "trigger": progress.get("trigger") or {},
            "started_at": progress.get("started_at"),
            "message": "%s %s: plan %s (%s)%s"
            % (
                "taking over" if handed else ("resuming" if resumed else "starting"),
                progress["id"],
                plan.name,
                ", ".join(progress_rules.pending(progress)),
                "; " + plan.why if plan.why else "",
            ),
        }

    def _replan(self, node: str, progress: Dict[str, Any], plan_name: str, why: str) -> Dict[str, Any]:
        plan = plan_for(plan_name, self.policy.plans, why=why, fence_when_open=self.policy.breaker.fence_when_open)

        def change(data: Dict[str, str]):
            current = json.loads(data[PROGRESS_KEY]) if PROGRESS_KEY in data else dict(progress)
            if current.get("phases"):
                return None, current  # it has begun acting already: keep its plan
            current["plan"] = plan.as_dict()
            return {PROGRESS_KEY: json.dumps(current, sort_keys=True)}, current

        updated = self.progress_store(node).update(change, write=self.write)
        if not self.write:
            updated = dict(progress, plan=plan.as_dict())
        return updated

    # -- phases -----------------------------------------------------------------------------------
    def update(self, node: str, remediation_id: str, now: float, change) -> Dict[str, Any]:
        """Apply a pure ``change(progress) -> progress`` to the remediation ``remediation_id``."""
        me = holders.current(now)

        def apply(data: Dict[str, str]):
            current = json.loads(data[PROGRESS_KEY]) if PROGRESS_KEY in data else None
            if not current:
                raise FieldError("remediation_id", "node %s has no remediation in progress" % node)
            if current.get("id") != remediation_id:
                raise FieldError(
                    "remediation_id", "node %s is in remediation %s, not %s" % (node, current.get("id"), remediation_id)
                )
            updated = change(current)
            updated["holder"] = dict(me)
            return {PROGRESS_KEY: json.dumps(updated, sort_keys=True)}, updated

        if not self.write:
            current = self.read_progress(node) or {}
            return change(current) if current.get("id") == remediation_id else current
        updated = self.progress_store(node).update(apply)
        self.mirror(node, updated)
        return updated

    def mirror(self, node: str, progress: Mapping[str, Any]) -> None:
        """The node annotation people read; best effort (the Node may be gone after replacement)."""
        if not self.write:
            return
        value = progress_rules.annotation(progress)
        try:
            self.core_v1.patch_node(node, {"metadata": {"annotations": {ANNOTATION: value}}}, _content_type=MERGE_PATCH)
        except ApiException as exc:
            if getattr(exc, "status", None) != 404:
                raise api_error(exc, "annotate node %s" % node) from exc
        except TypeError:  # an older client without _content_type: strategic merge does the same here
            self.core_v1.patch_node(node, {"metadata": {"annotations": {ANNOTATION: value}}})

    # -- breaker ----------------------------------------------------------------------------------
    def breaker_store(self) -> ConfigMapStore:
        return ConfigMapStore(self.core_v1, self.policy.namespace, BREAKER_NAME)

    def take_slot(self, node: str, remediation_id: str, now: float) -> breaker_rules.SlotDecision:
        gpu_nodes = self.gpu_node_count()

        def change(data: Dict[str, str]):
            state = breaker_rules.BreakerState.from_data(json.loads(data.get("state") or "{}"))
            new_state, decision = breaker_rules.take_slot(
                state, node, remediation_id, now, gpu_nodes, self.policy.breaker
            )
            if new_state == state:
                return None, decision
            return {"state": json.dumps(new_state.as_data(), sort_keys=True)}, decision

        return self.breaker_store().update(change, write=self.write)

    def breaker_state(self) -> breaker_rules.BreakerState:
        return breaker_rules.BreakerState.from_data(self.breaker_store().read_json("state", {}))

    def reset_breaker(self, clear_slots: bool) -> Dict[str, Any]:
        # Refused nodes whose Node is gone (replaced, deleted) leave the list: read before the swap.
        gone = sorted({entry["node"] for entry in self.breaker_state().refused
                       if isinstance(entry.get("node"), str) and self.read_node(entry["node"]) is None})

        def change(data: Dict[str, str]):
            state = breaker_rules.BreakerState.from_data(json.loads(data.get("state") or "{}"))
            new_state = breaker_rules.reset(state, clear_slots, gone)
            kept = {entry.get("node") for entry in new_state.refused}
            dropped = sorted({entry.get("node") for entry in state.refused} - kept)
            answer = {"before": state.as_data(), "after": new_state.as_data(), "changed": new_state != state,
                      "refused_gone": dropped}
            if new_state == state:
                return None, answer
            return {"state": json.dumps(new_state.as_data(), sort_keys=True)}, answer

        return self.breaker_store().update(change, write=self.write)

    # -- history ----------------------------------------------------------------------------------
    def history_store(self) -> ConfigMapStore:
        return ConfigMapStore(self.core_v1, self.policy.namespace, HISTORY_NAME)

    def _history(self, node: str) -> List[Dict[str, Any]]:
        data, _version = self.history_store().read()
        return json.loads(data.get(node) or "[]")

    def _add_history(self, node: str, entry: Mapping[str, Any]) -> None:
        now = float(entry["at"])

        def change(data: Dict[str, str]):
            history = json.loads(data.get(node) or "[]")
            data[node] = json.dumps(escalation_rules.add_entry(history, entry, now, HISTORY_KEEP_DAYS), sort_keys=True)
            return data, None

        self.history_store().update(change)

    def clear_history(self, nodes: Optional[List[str]] = None) -> List[str]:
        def change(data: Dict[str, str]):
            gone = sorted(data) if nodes is None else sorted(set(nodes) & set(data))
            if not gone:
                return None, []
            return {key: value for key, value in data.items() if key not in gone}, gone

        return self.history_store().update(change, write=self.write)
