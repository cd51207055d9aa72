# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The drain loop and the pod classification, over a fake of OUR EvictionApi interface.

What the API server does (the 429 of a PodDisruptionBudget, the 404 of a pod already gone,
kwok removing an evicted pod) is proven against the lab in
tests/integration/remediation/test_kube_modules.py; here the fake only replays outcomes, to
test what the loop makes of them: retries, the timeout, check mode, the report.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.client import KubeError, api_message
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.eviction import (
    BLOCKED,
    EVICTED,
    GONE,
    EvictionOutcome,
    classify,
    drain_node,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.pods import (
    is_daemonset_pod,
    is_mirror_pod,
    pod_ref,
)

# What the lab's kube-apiserver (1.36) answered to an eviction a budget refused.
PDB_REFUSAL = (
    '{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Cannot evict pod as it '
    'would violate the pod\'s disruption budget.","reason":"TooManyRequests","details":{"causes":'
    '[{"reason":"DisruptionBudget","message":"The disruption budget plain-pdb does not allow evicting pods '
    'currently"}]},"code":429}\n'
)
PDB_MESSAGE = (
    "Cannot evict pod as it would violate the pod's disruption budget.; "
    "The disruption budget plain-pdb does not allow evicting pods currently"
)


def pod(
    name: str,
    namespace: str = "ml",
    owner: Optional[str] = None,
    phase: str = "Running",
    annotations: Optional[Dict[str, str]] = None,
    deleting: bool = False,
) -> Dict[str, Any]:
    meta: Dict[str, Any] = {"name": name, "namespace": namespace, "uid": "uid-" + name}
    if owner:
        meta["ownerReferences"] = [
            {"kind": owner, "name": "x", "controller": True, "apiVersion": "apps/v1", "uid": "o"}
        ]
    if annotations:
        meta["annotations"] = annotations
    if deleting:
        meta["deletionTimestamp"] = "2026-11-30T03:00:00Z"
    return {"metadata": meta, "spec": {"nodeName": "gpu-a-003"}, "status": {"phase": phase}}


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: List[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


class ScriptedEvictionApi:
    """Our EvictionApi interface, answering from a script per pod; an evicted pod leaves after ``linger`` looks."""

    def __init__(
        self,
        pods: List[Dict[str, Any]],
        script: Dict[str, List[EvictionOutcome]],
        linger: int = 0,
        nodes: tuple = ("gpu-a-003",),
    ) -> None:
        self.on_node = list(pods)
        self.script = script
        self.linger = linger
        self.nodes = nodes
        self.asked: List[tuple] = []
        self.looks = 0
        self.leaving: Dict[str, int] = {}

    def check_node(self, node: str) -> None:
        if node not in self.nodes:
            raise KubeError("node %s not found: the cluster has no Node of that name (HTTP 404)" % node, 404)

    def pods(self, node: str) -> List[Dict[str, Any]]:
        self.looks += 1
        for ref in list(self.leaving):
            self.leaving[ref] -= 1
            if self.leaving[ref] < 0:
                self.on_node = [p for p in self.on_node if pod_ref(p) != ref]
                del self.leaving[ref]
        return list(self.on_node)

    def evict(
        self, namespace: str, name: str, grace_period: Optional[int] = None, dry_run: bool = False
    ) -> EvictionOutcome:
        ref = "%s/%s" % (namespace, name)
        self.asked.append((ref, grace_period, dry_run))
        answers = self.script.get(ref) or [EvictionOutcome(EVICTED)]
        outcome = answers.pop(0) if len(answers) > 1 else answers[0]
        if outcome.status == EVICTED and not dry_run:
            self.leaving[ref] = self.linger
        return outcome


def drain(api: ScriptedEvictionApi, clock: FakeClock, **kwargs: Any):
    # One fake clock is both the monotonic and the wall clock.
    return drain_node(api, "gpu-a-003", clock=clock, sleep=clock.sleep, wall=clock, **kwargs)


def test_daemonset_mirror_finished_and_terminating_pods_are_not_evicted() -> None:
    pods = [
        pod("agent-x", owner="DaemonSet"),
        pod("kube-proxy-gpu-a-003", annotations={"kubernetes.io/config.mirror": "abc"}),
        pod("job-1", owner="Job", phase="Succeeded"),
        pod("crashed", phase="Failed"),
        pod("going", deleting=True),
        pod("train-0", owner="StatefulSet"),
        pod("web-abc", owner="ReplicaSet"),
        pod("plain"),
    ]
    plan = classify(pods)
    assert [pod_ref(p) for p in plan.evict] == ["ml/train-0", "ml/web-abc", "ml/plain"]
    assert [pod_ref(p) for p in plan.terminating] == ["ml/going"]
    assert plan.skipped == [
        {"pod": "ml/agent-x", "why": "daemonset"},
        {"pod": "ml/kube-proxy-gpu-a-003", "why": "mirror"},
        {"pod": "ml/job-1", "why": "finished"},
        {"pod": "ml/crashed", "why": "finished"},
    ]
    assert pod_ref(classify(pods, skip_daemonsets=False).evict[0]) == "ml/agent-x"
    assert is_daemonset_pod(pods[0]) and not is_daemonset_pod(pods[5])
    assert is_mirror_pod(pods[1]) and not is_mirror_pod(pods[0])


def test_every_evictable_pod_is_evicted_and_waited_for() -> None:
    clock = FakeClock()
    api = ScriptedEvictionApi([pod("a"), pod("b", owner="ReplicaSet"), pod("ds", owner="DaemonSet")], {}, linger=2)
    result = drain(api, clock, grace_period=30)
    assert result.evicted == ["ml/a", "ml/b"]
    assert result.blocked == [] and not result.timed_out and result.changed
    assert [a[1:] for a in api.asked] == [(30, False), (30, False)]
    assert result.as_dict()["skipped_pods"] == [{"pod": "ml/ds", "why": "daemonset"}]
    # Waited until both left: quick looks first, at most poll apart.
    assert api.looks == 1 + 3 and clock.sleeps == [0.05, 0.1]


def test_a_budget_refusal_is_asked_again_every_poll_until_it_passes() -> None:
    clock = FakeClock()
    refused = EvictionOutcome(BLOCKED, PDB_MESSAGE)
    api = ScriptedEvictionApi([pod("a"), pod("b")], {"ml/b": [refused, refused, EvictionOutcome(EVICTED)]})
    result = drain(api, clock, poll=2, timeout=60)
    assert result.evicted == ["ml/a", "ml/b"] and result.blocked == [] and not result.timed_out
    assert [a[0] for a in api.asked] == ["ml/a", "ml/b", "ml/b", "ml/b"]
    assert clock.sleeps[:2] == [2, 2]


def test_a_pod_the_budget_still_protects_at_the_timeout_is_reported_blocked_with_the_budget() -> None:
    clock = FakeClock()
    api = ScriptedEvictionApi([pod("a"), pod("b")], {"ml/b": [EvictionOutcome(BLOCKED, PDB_MESSAGE)]})
    result = drain(api, clock, poll=1, timeout=5)
    assert result.evicted == ["ml/a"]
    assert result.blocked == [{"pod": "ml/b", "reason": PDB_MESSAGE}]
    assert result.timed_out and result.changed
    assert 5 <= clock.now - 100 <= 5.001
    assert [a[0] for a in api.asked].count("ml/b") == 6  # at 0, 1, 2, 3, 4 and 5 s


def test_a_pod_already_gone_counts_as_gone_not_as_ours() -> None:
    clock = FakeClock()
    api = ScriptedEvictionApi([pod("a"), pod("going", deleting=True)], {"ml/a": [EvictionOutcome(GONE)]})
    api.leaving["ml/going"] = 1  # someone else deletes it; it leaves after our first look
    result = drain(api, clock)
    assert result.evicted == [] and result.gone == ["ml/going", "ml/a"]
    assert not result.changed and not result.timed_out
    assert [a[0] for a in api.asked] == ["ml/a"]  # a pod being deleted is not evicted again


def test_an_evicted_pod_that_never_leaves_is_reported_at_the_timeout() -> None:
    clock = FakeClock()
    api = ScriptedEvictionApi([pod("stuck")], {}, linger=10**6)
    result = drain(api, clock, timeout=3, poll=1)
    assert result.evicted == ["ml/stuck"]
    assert result.blocked == [{"pod": "ml/stuck", "reason": "evicted or terminating, still on the node after 3s"}]
    assert result.timed_out


def test_check_mode_asks_with_a_dry_run_and_waits_for_nothing() -> None:
    clock = FakeClock()
    api = ScriptedEvictionApi(
        [pod("a"), pod("b"), pod("ds", owner="DaemonSet")], {"ml/b": [EvictionOutcome(BLOCKED, PDB_MESSAGE)]}
    )
    result = drain(api, clock, check_mode=True)
    assert result.evicted == ["ml/a"] and result.blocked == [{"pod": "ml/b", "reason": PDB_MESSAGE}]
    assert result.changed and not result.timed_out
    assert [a[2] for a in api.asked] == [True, True]
    assert clock.sleeps == [] and api.looks == 1
    assert [pod_ref(p) for p in api.on_node] == ["ml/a", "ml/b", "ml/ds"]


def test_a_node_with_nothing_to_evict_is_no_change() -> None:
    clock = FakeClock()
    result = drain(ScriptedEvictionApi([pod("ds", owner="DaemonSet")], {}), clock)
    assert result.as_dict() == {
        "changed": False,
        "evicted": [],
        "gone": [],
        "skipped_pods": [{"pod": "ml/ds", "why": "daemonset"}],
        "blocked": [],
        "timed_out": False,
        "elapsed": 0.0,
        "done": True,
        "waiting": [],
        "started": 100.0,
        "timeout_left": 0.0,
    }


def test_an_unknown_node_fails_before_any_eviction() -> None:
    api = ScriptedEvictionApi([pod("a")], {})
    with pytest.raises(KubeError, match="node gpu-z-009 not found"):
        drain_node(api, "gpu-z-009")
    assert api.asked == [] and api.looks == 0


def test_an_api_error_mid_drain_says_what_was_evicted_before_it() -> None:
    class FailingApi(ScriptedEvictionApi):
        def evict(self, namespace, name, grace_period=None, dry_run=False):
            if name == "b":
                raise KubeError("evict pod ml/b: Forbidden (HTTP 403)", 403)
            return super().evict(namespace, name, grace_period, dry_run)

    with pytest.raises(KubeError) as raised:
        drain(FailingApi([pod("a"), pod("b")], {}), FakeClock())
    assert str(raised.value) == "evict pod ml/b: Forbidden (HTTP 403); evicted before the error: ml/a"
    assert raised.value.status == 403


@pytest.mark.parametrize(
    "kwargs, field",
    [({"timeout": -1}, "timeout"), ({"poll": 0}, "poll"), ({"grace_period": -5}, "grace_period")],
)
def test_bad_input_names_the_option_and_evicts_nothing(kwargs: Dict[str, Any], field: str) -> None:
    api = ScriptedEvictionApi([pod("a")], {})
    with pytest.raises(FieldError) as raised:
        drain(api, FakeClock(), **kwargs)
    assert raised.value.field == field and api.asked == []


def test_the_refusal_message_names_the_budget() -> None:
    class Refusal(Exception):
        status = 429
        body = PDB_REFUSAL

    assert api_message(Refusal()) == PDB_MESSAGE
    assert api_message(Exception("no body")) == ""


def test_a_drain_waited_in_slices_says_what_is_left_and_times_out_once() -> None:
    clock = FakeClock()
    api = ScriptedEvictionApi([pod("a"), pod("b")], {"ml/b": [EvictionOutcome(BLOCKED, PDB_MESSAGE)]})
    first = drain(api, clock, poll=1, timeout=10, return_after=4)
    assert not first.done and first.waiting == ["ml/b"] and first.evicted == ["ml/a"]
    assert first.started == 100.0 and first.timeout_left == pytest.approx(6) and first.blocked == []
    second = drain(api, clock, poll=1, timeout=10, return_after=4, started=first.started)
    assert not second.done and second.timeout_left == pytest.approx(2)
    last = drain(api, clock, poll=1, timeout=10, return_after=4, started=first.started)
    assert last.done and last.timed_out and last.blocked == [{"pod": "ml/b", "reason": PDB_MESSAGE}]
    assert clock.now - 100 == pytest.approx(10, abs=0.01)  # the timeout once, not once per slice


def test_a_slice_that_sees_the_pods_leave_is_done() -> None:
    clock = FakeClock()
    api = ScriptedEvictionApi([pod("a")], {}, linger=2)
    result = drain(api, clock, poll=1, timeout=60, return_after=30)
    assert result.done and result.evicted == ["ml/a"] and not result.timed_out and result.waiting == []
