"""The repeat drill (issue 20, part 5): a fault that comes back after its cure must go to a human. The
remediation's escalation is the rail under test: the scheduler step passes on a remediation with plan
HOLD and the node fenced, and fails at once on any other plan. Observed here through fake probes of
our own; the real loop in the lab is test_drill_end_to_end.py's repeat drill."""

from __future__ import annotations

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos import experiments, gpu_fault, observe
from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError

CURE = {"id": "r-cure", "started_at": -100.0, "plan": {"name": "RESET_GPU", "why": ""}, "result": "succeeded"}
HOLD = {"id": "r-hold", "started_at": 2.0, "result": None,
        "plan": {"name": "HOLD", "why": "Xid48 came back after remediation r-cure (RESET_GPU) of this node"}}


class RepeatProbes(observe.Probes):
    """Before ``run_at`` the node's latest remediation is the cure; from then, ``run``; the node is
    fenced in Slurm and cordoned from ``fence_at``."""

    def __init__(self, run=HOLD, run_at=2.0, fence_at=4.0):
        super().__init__(None, None, object(), None, "ns", lambda path: "")
        self.clock, self.run, self.run_at, self.fence_at = 0.0, run, run_at, fence_at

    def remediation(self, node):
        return self.run if self.clock >= self.run_at else CURE

    def kube_fenced(self, node):
        return "cordoned" if self.clock >= self.fence_at else None

    def slurm_fenced(self, node):
        return "DRAIN (gpufleet: Xid48)" if self.clock >= self.fence_at else None

    def job(self, job_id):
        return None


def watch(probes, monkeypatch, deadline=30):
    monkeypatch.setattr(observe, "breaker_tripped", lambda core_v1, namespace: False)
    experiment = experiments.get("gpu_xid_repeat")
    request = {"nodes": ["n1"], "experiment": experiment.name, "injected_at": 0.0, "poll_s": 1.0,
               "deadlines": {"detected": deadline, "alerted": deadline, "scheduler": deadline, "recovered": deadline},
               "expectations": dict(experiments.loop_expectations(experiment, {"xid_severity": "fatal"}),
                                    detection=None),
               "baseline": {}}

    def sleep(seconds):
        probes.clock += seconds

    seen = observe.observe(request, probes, clock=lambda: probes.clock, sleep=sleep)
    return seen, {s["step"]: s for s in seen["steps"]}


def test_the_hold_is_the_step_once_the_node_is_fenced(monkeypatch):
    seen, steps = watch(RepeatProbes(), monkeypatch)
    scheduler = steps["scheduler"]
    assert scheduler["verdict"] == "pass", scheduler
    assert "remediation r-hold, plan HOLD (Xid48 came back after remediation r-cure" in scheduler["observed"]
    assert scheduler["elapsed_s"] == 4.0  # when the node was fenced, not when the run began
    events = {e["name"]: e for e in seen["events"]}
    assert events["escalation"]["at"] == 2.0 and "came back" in events["escalation"]["detail"]
    recovered = steps["recovered"]
    assert recovered["verdict"] == "not_observable" and "return-node.yml" in recovered["observed"]


def test_a_second_cure_instead_of_a_hold_fails_the_step_at_once(monkeypatch):
    again = {"id": "r-again", "started_at": 2.0, "plan": {"name": "RESET_GPU", "why": ""}}
    _seen, steps = watch(RepeatProbes(run=again), monkeypatch)
    scheduler = steps["scheduler"]
    assert scheduler["verdict"] == "fail" and scheduler["elapsed_s"] == 2.0, scheduler
    assert "not held: n1: remediation r-again, plan RESET_GPU" in scheduler["observed"]
    assert "gpu_xid with the same xid" in scheduler["observed"]


def test_the_cure_before_the_injection_is_not_taken_for_this_faults_run(monkeypatch):
    # The latest run stays the cure (plan RESET_GPU, before the injection): neither a pass nor a fail.
    _seen, steps = watch(RepeatProbes(run=CURE), monkeypatch, deadline=20)
    scheduler = steps["scheduler"]
    assert scheduler["verdict"] == "fail" and "deadline 20" in scheduler["observed"], scheduler
    assert "n1: no remediation since the injection" in scheduler["observed"]


def test_a_hold_with_the_node_not_yet_fenced_waits(monkeypatch):
    _seen, steps = watch(RepeatProbes(fence_at=1e9), monkeypatch, deadline=20)
    assert steps["scheduler"]["verdict"] == "fail" and "deadline 20" in steps["scheduler"]["observed"]


def test_the_repeat_needs_a_fatal_xid():
    assert gpu_fault.Fault("gpu_xid_repeat", {}).xid == 48
    with pytest.raises(FieldError) as refused:
        gpu_fault.Fault("gpu_xid_repeat", {"xid": 13})
    assert refused.value.field == "params.xid" and "gpu_xid_repeat needs an XID" in str(refused.value)
