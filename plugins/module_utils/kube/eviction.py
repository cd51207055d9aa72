# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Draining a node with the Eviction API: PodDisruptionBudgets honoured, a timeout, the blocked pods named.

An eviction (policy/v1 Eviction on a pod) is a delete that the API server refuses with 429
while it would break a PodDisruptionBudget; the answer names the budget. A refused pod is asked
again every ``poll`` seconds until ``timeout``, then reported as blocked, not failed: the node
stays fenced and a human (or the budget's owner) decides. DaemonSet pods (their controller
puts them back, they tolerate cordons), mirror pods (only their kubelet removes them) and
finished pods are left alone, as ``kubectl drain --ignore-daemonsets`` does.

``EvictionApi`` is the only part that talks to the API server; ``drain_node`` is the loop
around it, with the clock and the sleep passed in.

A long drain can be waited in slices (``return_after``): the call returns ``done=false`` with the
pods still refused or still leaving, and the caller says where the drain is and calls again with
``started`` (the wall-clock time the first call returned), so the timeout is counted once. A pod
evicted in an earlier slice is terminating by then, and is waited for, not evicted again.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.fields import check_node_name, check_number
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.client import (
    ApiException,
    KubeError,
    TransportError,
    api_failure,
    api_message,
    unreachable,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.nodes import NodeWriter
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.pods import (
    is_daemonset_pod,
    is_finished_pod,
    is_mirror_pod,
    is_terminating_pod,
    pod_ref,
    pods_on_node,
)

EVICTED = "evicted"
GONE = "gone"
BLOCKED = "blocked"


@dataclass(frozen=True)
class EvictionOutcome:
    """What the API server said to one eviction: evicted, gone (404) or blocked (429, with its message)."""

    status: str
    message: str = ""


class EvictionApi:
    """The API calls of a drain, through a CoreV1Api."""

    def __init__(self, core_v1: Any) -> None:
        self.core_v1 = core_v1

    def check_node(self, node: str) -> None:
        """Fails with a KubeError naming the node when the cluster has no such Node."""
        NodeWriter(self.core_v1).read_node(node)

    def pods(self, node: str) -> List[Dict[str, Any]]:
        return pods_on_node(self.core_v1, node)

    def evict(
        self, namespace: str, name: str, grace_period: Optional[int] = None, dry_run: bool = False
    ) -> EvictionOutcome:
        delete_options: Dict[str, Any] = {}
        if grace_period is not None:
            delete_options["gracePeriodSeconds"] = grace_period
        if dry_run:
            delete_options["dryRun"] = ["All"]
        body: Dict[str, Any] = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
        }
        if delete_options:
            body["deleteOptions"] = delete_options
        what = "evict pod %s/%s" % (namespace, name)
        try:
            self.core_v1.create_namespaced_pod_eviction(name, namespace, body)
        except ApiException as exc:
            status = getattr(exc, "status", None)
            if status == 404:
                return EvictionOutcome(GONE)
            if status == 429:
                return EvictionOutcome(BLOCKED, api_message(exc) or "Too Many Requests (HTTP 429)")
            raise api_failure(exc, what) from exc
        except TransportError as exc:
            raise unreachable(exc, what) from exc
        return EvictionOutcome(EVICTED)


@dataclass
class DrainPlan:
    """The pods of a node sorted for a drain."""

    evict: List[Dict[str, Any]] = field(default_factory=list)
    terminating: List[Dict[str, Any]] = field(default_factory=list)
    skipped: List[Dict[str, str]] = field(default_factory=list)


def classify(pods: List[Mapping[str, Any]], skip_daemonsets: bool = True) -> DrainPlan:
    """Pure: which pods a drain evicts, which are already going, which it leaves (and why)."""
    plan = DrainPlan()
    for pod in pods:
        if is_mirror_pod(pod):
            plan.skipped.append({"pod": pod_ref(pod), "why": "mirror"})
        elif skip_daemonsets and is_daemonset_pod(pod):
            plan.skipped.append({"pod": pod_ref(pod), "why": "daemonset"})
        elif is_finished_pod(pod):
            plan.skipped.append({"pod": pod_ref(pod), "why": "finished"})
        elif is_terminating_pod(pod):
            plan.terminating.append(dict(pod))
        else:
            plan.evict.append(dict(pod))
    return plan


@dataclass
class DrainResult:
    evicted: List[str] = field(default_factory=list)
    gone: List[str] = field(default_factory=list)
    skipped: List[Dict[str, str]] = field(default_factory=list)
    blocked: List[Dict[str, str]] = field(default_factory=list)
    timed_out: bool = False
    elapsed: float = 0.0
    done: bool = True  # False: a slice ended before the timeout with pods still to go
    waiting: List[str] = field(default_factory=list)  # with done=False: the pods refused or still leaving
    started: float = 0.0  # when the drain's timeout began (time.time()), for the next slice
    timeout_left: float = 0.0

    @property
    def changed(self) -> bool:
        return bool(self.evicted)

    def as_dict(self) -> Dict[str, Any]:
        return {
            "changed": self.changed,
            "evicted": self.evicted,
            "gone": self.gone,
            # Not "skipped": Ansible reads a true "skipped" in a result as a skipped task.
            "skipped_pods": self.skipped,
            "blocked": self.blocked,
            "timed_out": self.timed_out,
            "elapsed": round(self.elapsed, 3),
            "done": self.done,
            "waiting": self.waiting,
            "started": self.started,
            "timeout_left": round(self.timeout_left, 2),
        }


def _uid(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return meta.get("uid") or pod_ref(pod)


def drain_node(
    api: EvictionApi,
    node: str,
    timeout: float = 120,
    poll: float = 1,
    grace_period: Optional[int] = None,
    skip_daemonsets: bool = True,
    check_mode: bool = False,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    return_after: Optional[float] = None,
    started: Optional[float] = None,
    wall: Callable[[], float] = time.time,
) -> DrainResult:
    """Evict the pods of ``node`` and wait until they have left it, or ``timeout`` seconds pass.

    Check mode asks each eviction with the API server's dry run: a pod a budget protects shows
    up in ``blocked``, the others in ``evicted``; nothing is evicted and nothing is waited for.
    ``return_after``: seconds this call waits at most before it returns ``done=False``;
    ``started``: when an earlier slice of the same drain began (``time.time()``).
    """
    # An empty name would list every node and select every unscheduled pod (spec.nodeName=):
    # the drain of "" evicted every Pending pod of the cluster.
    check_node_name(node, "name")
    timeout = check_number(timeout, "timeout", minimum=0)
    poll = check_number(poll, "poll", above=0)
    if grace_period is not None and grace_period < 0:
        raise FieldError("grace_period", "must be 0 or more seconds, got %r" % (grace_period,))
    if return_after is not None:
        check_number(return_after, "return_after", above=0)
    began = wall() if started is None else check_number(started, "started", above=0)
    start = clock()
    deadline = start + max(0.0, began + timeout - wall())
    until = deadline if return_after is None else min(deadline, start + return_after)
    api.check_node(node)
    plan = classify(api.pods(node), skip_daemonsets)
    result = DrainResult(skipped=plan.skipped, gone=[pod_ref(p) for p in plan.terminating], started=began)
    waiting = {_uid(p): pod_ref(p) for p in plan.terminating}
    pending = plan.evict
    refusals: Dict[str, str] = {}

    def ask(pod: Mapping[str, Any], dry_run: bool) -> EvictionOutcome:
        meta = pod.get("metadata") or {}
        try:
            return api.evict(meta.get("namespace") or "default", meta.get("name") or "", grace_period, dry_run)
        except KubeError as exc:
            done = "; evicted before the error: %s" % ", ".join(result.evicted) if result.evicted else ""
            raise KubeError("%s%s" % (exc, done), exc.status) from exc

    if check_mode:
        for pod in pending:
            outcome = ask(pod, True)
            if outcome.status == EVICTED:
                result.evicted.append(pod_ref(pod))
            elif outcome.status == GONE:
                result.gone.append(pod_ref(pod))
            else:
                result.blocked.append({"pod": pod_ref(pod), "reason": outcome.message})
        result.elapsed = clock() - start
        return result

    while True:
        refused = []
        for pod in pending:
            outcome = ask(pod, False)
            if outcome.status == EVICTED:
                result.evicted.append(pod_ref(pod))
                waiting[_uid(pod)] = pod_ref(pod)
            elif outcome.status == GONE:
                result.gone.append(pod_ref(pod))
            else:
                refused.append(pod)
                refusals[pod_ref(pod)] = outcome.message
        pending = refused
        if not pending or clock() >= until:
            break
        sleep(min(poll, max(until - clock(), 0)))

    # Evicted is not yet gone: the pod terminates (its grace period) before it leaves the node.
    # The first looks come quickly (a pod without a grace period is gone in milliseconds), then
    # every ``poll`` seconds.
    delay = min(poll, 0.05)
    while waiting:
        present = {_uid(p) for p in api.pods(node)}
        waiting = {uid: ref for uid, ref in waiting.items() if uid in present}
        if not waiting or clock() >= until:
            break
        sleep(min(delay, max(until - clock(), 0)))
        delay = min(delay * 2, poll)

    if (pending or waiting) and clock() < deadline:
        # A slice ended before the timeout: say what is left; nothing is concluded yet.
        result.done = False
        result.waiting = [pod_ref(p) for p in pending] + list(waiting.values())
        result.timeout_left = deadline - clock()
        result.elapsed = clock() - start
        return result

    result.blocked = [{"pod": pod_ref(p), "reason": refusals[pod_ref(p)]} for p in pending]
    result.blocked += [
        {"pod": ref, "reason": "evicted or terminating, still on the node after %gs" % timeout}
        for ref in waiting.values()
    ]
    result.timed_out = bool(result.blocked)
    result.elapsed = clock() - start
    return result
