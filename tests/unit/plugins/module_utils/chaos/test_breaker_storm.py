"""The storm drill (issue 20, part 5): the remediation's circuit breaker is the rail under test. Its
trip is the scheduler step, not a reason to abort; the nodes it let through are quarantined and the
ones it refused are fenced in Slurm only. Observed here through fake probes of our own; the loop
itself against the real lab is test_remediation_loop.py's storm test."""

from __future__ import annotations

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos import experiments, gpu_fault, observe
from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError

NODES = ["n1", "n2", "n3"]


class StormProbes(observe.Probes):
    """The breaker trips at ``trip_at`` with n2 and n3 refused; n1 is quarantined at ``fence_at``; the
    refused ones are fenced in Slurm at ``fence_at`` and, with ``cordon_refused``, cordoned too."""

    def __init__(self, trip_at=3.0, fence_at=5.0, cordon_refused=False):
        super().__init__(None, None, object(), None, "ns", lambda path: "")
        self.clock, self.trip_at, self.fence_at, self.cordon_refused = 0.0, trip_at, fence_at, cordon_refused

    def breaker(self):
        if self.clock < self.trip_at:
            return {"tripped": False, "slots": [{"node": "n1", "id": "r-1", "at": 1.0}]}
        return {"tripped": True, "tripped_at": self.trip_at, "tripped_why": "1 of 1 slots in 600 s",
                "slots": [{"node": "n1", "id": "r-1", "at": 1.0}],
                "refused": [{"node": "n2", "id": "r-2", "at": 3.0}, {"node": "n3", "id": "r-3", "at": 3.0},
                            {"node": "elsewhere", "id": "r-9", "at": 3.0}]}

    def kube_fenced(self, node):
        cordoned = self.clock >= self.fence_at and (node == "n1" or self.cordon_refused)
        return "cordoned" if cordoned else None

    def slurm_fenced(self, node):
        return "DRAIN (gpufleet: Xid79)" if self.clock >= self.fence_at else None

    def job(self, job_id):
        return None


def watch(probes, monkeypatch, deadline=30):
    monkeypatch.setattr(observe, "breaker_tripped", lambda core_v1, namespace: probes.clock >= probes.trip_at)
    experiment = experiments.get("breaker_storm")
    request = {"nodes": NODES, "experiment": experiment.name, "injected_at": 0.0, "poll_s": 1.0,
               "deadlines": {"detected": deadline, "alerted": deadline, "scheduler": deadline, "recovered": deadline},
               "expectations": dict(experiments.loop_expectations(experiment, {"xid_severity": "fatal"}),
                                    detection=None),
               "baseline": {}}

    def sleep(seconds):
        probes.clock += seconds

    return observe.observe(request, probes, clock=lambda: probes.clock, sleep=sleep)


def test_the_trip_is_the_step_the_cap_quarantines_and_the_refused_are_only_fenced_in_slurm(monkeypatch):
    seen = watch(StormProbes(), monkeypatch)
    steps = {s["step"]: s for s in seen["steps"]}
    assert seen["aborted"] is None  # any other drill aborts on the trip
    assert steps["scheduler"]["verdict"] == "pass", steps["scheduler"]
    observed = steps["scheduler"]["observed"]
    assert "breaker tripped; let through: n1 (Slurm DRAIN" in observed and "refused: n2 (Slurm DRAIN" in observed
    recovered = steps["recovered"]
    assert recovered["verdict"] == "not_observable" and "remediation-reset.yml" in recovered["observed"]
    events = {e["name"]: e["at"] for e in seen["events"]}
    assert events["breaker"] == 3.0 and events["quarantine"] == 5.0


def test_a_refused_node_taken_out_of_kubernetes_fails_the_step_at_once(monkeypatch):
    seen = watch(StormProbes(cordon_refused=True), monkeypatch)
    scheduler = next(s for s in seen["steps"] if s["step"] == "scheduler")
    assert scheduler["verdict"] == "fail" and scheduler["observed"].startswith(
        "refused by the breaker yet taken out of Kubernetes: n2, n3"), scheduler
    assert scheduler["elapsed_s"] == 5.0  # when it was seen, not at the deadline


def test_a_breaker_that_never_trips_fails_the_step_by_its_deadline(monkeypatch):
    seen = watch(StormProbes(trip_at=1e9), monkeypatch, deadline=20)
    scheduler = next(s for s in seen["steps"] if s["step"] == "scheduler")
    assert scheduler["verdict"] == "fail" and "deadline 20" in scheduler["observed"]
    assert "breaker closed" in scheduler["observed"]


def test_any_other_drill_still_aborts_when_the_breaker_trips(monkeypatch):
    probes = StormProbes()
    monkeypatch.setattr(observe, "breaker_tripped", lambda core_v1, namespace: probes.clock >= probes.trip_at)
    experiment = experiments.get("gpu_xid")
    request = {"nodes": ["n1"], "experiment": "gpu_xid", "injected_at": 0.0, "poll_s": 1.0,
               "deadlines": {"detected": 30, "alerted": 30, "scheduler": 30, "recovered": 30},
               "expectations": dict(experiments.loop_expectations(experiment, {"xid_severity": "fatal"}),
                                    detection=None), "baseline": {}}

    def sleep(seconds):
        probes.clock += seconds

    seen = observe.observe(request, probes, clock=lambda: probes.clock, sleep=sleep)
    assert seen["aborted"] == "the remediation circuit breaker tripped during the drill"


def test_a_storm_needs_a_fatal_xid():
    assert gpu_fault.Fault("breaker_storm", {}).xid == 79
    with pytest.raises(FieldError) as refused:
        gpu_fault.Fault("breaker_storm", {"xid": 13})
    assert refused.value.field == "params.xid" and "fatal" in str(refused.value)
