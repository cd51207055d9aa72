"""What an incident cost: the node's GPUs until it is back, each moved job's GPUs until it runs again."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation.cost import cost_text, incident_cost
from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation.fault import fault_from_condition
from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation.record import end_text

FAULT = 1000.0


def phase(name, end, **outcome):
    return {"phase": name, "start": end - 1, "end": end, "outcome": outcome}


def record(plan, timeline, jobs=(), since=FAULT, started=FAULT + 2):
    return {"id": "r-1", "node": "gpu-a-003", "result": "succeeded", "plan": {"name": plan},
            "fault": {"since": since}, "started_at": started, "timeline": list(timeline), "jobs": list(jobs)}


REPLACED = record("RESTART_BM", [phase("jobs", FAULT + 30), phase("replace", FAULT + 3600, replacement="gpu-a-009")],
                  jobs=[{"job_id": "41", "gpus": 8, "signalled": True, "fate": "requeued"},
                        {"job_id": "42", "gpus": 2, "signalled": True, "fate": "left"}])


def test_a_replacement_costs_the_node_until_the_spare_and_each_job_until_it_runs_again():
    cost = incident_cost(REPLACED, 8, {"41": {"state": "RUNNING", "start_time": FAULT + 1800},
                                       "42": {"state": "RUNNING", "start_time": FAULT + 360}}, now=FAULT + 3700)
    assert cost["node_gpu_hours"] == 8.0 and cost["back_in_service_at"] == FAULT + 3600
    assert [job["waiting_gpu_hours"] for job in cost["jobs"]] == [4.0, 0.2]
    assert cost["gpu_hours_lost"] == 12.2 and cost["open"] == []
    # Job 41 was requeued by force after the grace: its work since its last checkpoint is not known.
    assert cost["unknown"] == ["the work job 41 did since its last checkpoint (it did not leave within the grace)"]
    assert cost_text(cost) == "at least 12.20 GPU-hours lost (node 8.00, jobs waiting 4.20)"


def test_what_has_not_ended_counts_up_to_the_record_and_is_a_floor():
    held = record("HOLD", [phase("jobs", FAULT + 30), phase("hold", FAULT + 40)],
                  jobs=[{"job_id": "7", "gpus": 4, "signalled": True, "fate": "left"}])
    # Job 7 still pending; its old start (before it left the node) is not a new run.
    cost = incident_cost(held, 8, {"7": {"state": "PENDING", "start_time": FAULT - 500}}, now=FAULT + 1800)
    assert cost["open"] == ["node", "job 7"] and cost["back_in_service_at"] is None
    assert (cost["node_gpu_hours"], cost["waiting_gpu_hours"]) == (4.0, 2.0)
    assert cost_text(cost).startswith("at least 6.00 GPU-hours lost")


def test_a_reset_node_is_back_at_its_resume_and_a_spare_less_replacement_is_not_back():
    reset = record("RESET_GPU", [phase("reset_gpu", FAULT + 100), phase("resume", FAULT + 450)])
    assert incident_cost(reset, 8, {}, now=FAULT + 500)["node_gpu_hours"] == 1.0
    no_spare = record("RESTART_BM", [phase("replace", FAULT + 60, replacement=None, provider="none")])
    assert incident_cost(no_spare, 8, {}, now=FAULT + 900)["open"] == ["node"]


def test_an_application_fault_costs_the_node_nothing():
    cost = incident_cost(record("RESTART_APP", [phase("notify", FAULT + 3)]), 8, {}, now=FAULT + 60)
    assert cost["gpu_hours_lost"] == 0 and cost["open"] == []


def test_a_stalled_job_costs_its_own_gpus_until_it_runs_again_and_the_node_nothing():
    """Plan JOB_HANG does nothing to the node: only the job's GPUs count, from the fault's start (its alert's,
    else the remediation's)."""
    stalled = dict(record("JOB_HANG", [phase("notify", FAULT + 3), phase("jobs", FAULT + 15)],
                          jobs=[{"job_id": "9", "gpus": 4, "signalled": True, "fate": "requeued"}], since=None),
                   plan={"name": "JOB_HANG", "acts": False})
    cost = incident_cost(stalled, 8, {"9": {"state": "RUNNING", "start_time": FAULT + 362}}, now=FAULT + 400)
    assert (cost["node_gpu_hours"], cost["back_in_service_at"], cost["open"]) == (0.0, FAULT + 2, [])
    assert cost["waiting_gpu_hours"] == 0.4 and cost["gpu_hours_lost"] == 0.4
    # With the alert's start as the fault's (fault_from_trigger), the job waited from then.
    fired = dict(stalled, fault={"since": FAULT - 358})
    cost = incident_cost(fired, 8, {"9": {"state": "RUNNING", "start_time": FAULT + 362}}, now=FAULT + 400)
    assert cost["fault_at"] == FAULT - 358 and cost["waiting_gpu_hours"] == 0.8 and cost["node_gpu_hours"] == 0.0


def test_what_slurm_could_not_say_is_named_not_guessed():
    cost = incident_cost(record("RESTART_BM", [phase("replace", FAULT + 360, replacement="gpu-a-009")],
                                jobs=[{"job_id": "9", "gpus": None, "signalled": False, "fate": "left"}]),
                         None, {}, now=FAULT + 400)
    assert cost["unknown"] == ["the node's GPU count", "the GPUs of job 9"] and cost["gpu_hours_lost"] == 0
    assert cost["open"] == ["job 9"]


def test_the_fault_begins_at_the_conditions_transition_else_at_the_start():
    condition = {"type": "GpuHealthy", "status": "False", "reason": "Xid79", "message": "GPU lost",
                 "lastTransitionTime": "2026-12-06T02:30:00Z"}
    since = fault_from_condition(condition).since
    assert since == 1796524200.0
    assert incident_cost(record("IGNORE", [], since=None, started=FAULT + 2), 8, {}, now=FAULT)["fault_at"] == FAULT + 2
    assert fault_from_condition(dict(condition, lastTransitionTime="yesterday")).since is None
    # As the Python client serializes it, and as a datetime.
    assert fault_from_condition(dict(condition, lastTransitionTime="2026-12-06T02:30:00+00:00")).since == since
    moment = datetime(2026, 12, 6, 2, 30, tzinfo=timezone.utc)
    assert fault_from_condition(dict(condition, lastTransitionTime=moment)).since == since


@pytest.mark.parametrize("with_cost", [True, False])
def test_the_end_text_says_what_it_cost(with_cost):
    done = dict(REPLACED, duration_s=3600, jobs=[])
    if with_cost:
        done["cost"] = incident_cost(done, 8, {}, now=FAULT + 3700)
    assert ("Cost: 8.00 GPU-hours lost (node 8.00, jobs waiting 0.00)." in end_text(done)) is with_cost


def test_a_validated_spare_is_back_when_admitted_and_one_that_failed_is_not():
    steps = [phase("replace", FAULT + 600, replacement="gpu-a-009")]
    admitted = record("RESTART_BM", [*steps, phase("admit", FAULT + 960, passed=True)])
    assert incident_cost(admitted, 8, {}, now=FAULT + 1000)["back_in_service_at"] == FAULT + 960
    failed = record("RESTART_BM", [*steps, phase("admit", FAULT + 960, passed=False)])
    assert incident_cost(failed, 8, {}, now=FAULT + 1000)["back_in_service_at"] is None
    # No backend: the spare's fence lifted at once, in service at the end of admit too.
    lifted = record("RESTART_BM", [*steps, phase("admit", FAULT + 601, skipped="no validation backend")])
    assert incident_cost(lifted, 8, {}, now=FAULT + 1000)["back_in_service_at"] == FAULT + 601
    no_spare = record("RESTART_BM", [phase("replace", FAULT + 60, replacement=None, provider="none"),
                                     phase("admit", FAULT + 61, skipped="no replacement named")])
    assert incident_cost(no_spare, 8, {}, now=FAULT + 1000)["back_in_service_at"] is None
