"""The remediation's pure policy: plans, escalation, breaker, progress, the fault and the record."""

from __future__ import annotations

import json

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.health import gpu_condition
from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation import (
    breaker,
    escalation,
    plans,
    progress,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation import record as records
from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation.fault import (
    fault_from_condition,
    fault_from_input,
    slurm_reason,
)

# The condition as the agent writes it, through the codec.
XID79 = gpu_condition.encode(gpu_condition.NodeFault(
    "fatal", "RESTART_BM", "Xid79",
    "GPU 3 (GPU-8c1e2f0a-1111-2222-3333-444455556666, 0000:3b:00.0): XID 79 GPU has fallen off the bus -> RESTART_BM",
    xids=(79,), gpu_index=3, gpu_uuid="GPU-8c1e2f0a-1111-2222-3333-444455556666", pci_bus_id="0000:3b:00.0"))


# -- fault -------------------------------------------------------------------------------------------
def test_fault_from_the_agents_condition():
    fault = fault_from_condition(XID79)
    assert (fault.verdict, fault.action, fault.reason, fault.xids, fault.gpu_index) == (
        "fatal",
        "RESTART_BM",
        "Xid79",
        (79,),
        3,
    )
    assert fault.gpu_uuid == "GPU-8c1e2f0a-1111-2222-3333-444455556666"
    assert fault.message == XID79["message"].split("\n")[0]  # the people's line


def test_a_condition_of_an_agent_before_the_data_line_is_read_from_its_head():
    legacy = dict(XID79, message=XID79["message"].split("\n")[0])
    fault = fault_from_condition(legacy)
    assert (fault.verdict, fault.action, fault.reason, fault.xids, fault.gpu_index) == (
        "fatal", "RESTART_BM", "Xid79", (), None)


@pytest.mark.parametrize("status", ["True", "Unknown"])
def test_no_fault_when_healthy_or_unknown(status):
    assert fault_from_condition(dict(XID79, status=status)) is None
    assert fault_from_condition(None) is None


def test_a_condition_we_did_not_write_goes_to_a_human():
    fault = fault_from_condition({"type": "GpuHealthy", "status": "False", "reason": "Odd", "message": "something"})
    assert fault.action == "CONTACT_SUPPORT"


def test_slurm_reason_is_ours_and_never_slinkys():
    reason = slurm_reason(fault_from_condition(XID79), "r-1")
    assert reason == "gpufleet: Xid79 GPU-8c1e2f0a-1111-2222-3333-444455556666 (remediation r-1)"
    assert not reason.startswith("slurm-operator:")


def test_fault_input_names_the_bad_field():
    with pytest.raises(FieldError) as error:
        fault_from_input({"action": "REBOOT"})
    assert error.value.field == "fault.action"
    assert fault_from_input({"action": "reset_gpu", "xid": 48}).reason == "Xid48"


# -- plans -------------------------------------------------------------------------------------------
def test_fatal_xid79_plan_replaces_the_node():
    plan = plans.plan_for("RESTART_BM")
    assert plan.phases == ("fence", "quarantine", "notify", "jobs", "down", "opt_out", "drain", "evidence", "replace",
                           "admit", "record")
    assert plan.acts


@pytest.mark.parametrize("action", ["RESET_GPU", "DRAIN_AND_RESET"])
def test_reset_plans_reset_verify_and_resume(action):
    phases = plans.plan_for(action).phases
    assert phases.index("drain") < phases.index("reset_gpu") < phases.index("verify") < phases.index("resume")
    assert "replace" not in phases


def test_proportionate_plans():
    assert plans.plan_for("RESTART_APP").phases == ("notify", "record")
    assert plans.plan_for("IGNORE").phases == ("record",)
    # A refused remediation still fences in Slurm (no new work), and only that; it takes no slot.
    refused = plans.plan_for("BREAKER_OPEN")
    assert refused.phases == ("fence", "notify", "record") and not refused.needs_slot
    assert plans.plan_for("BREAKER_OPEN", fence_when_open=False).phases == ("notify", "record")
    assert plans.plan_for("RESTART_BM").needs_slot
    assert "hold" in plans.plan_for("CONTACT_SUPPORT").phases


def test_every_catalog_action_has_a_plan():
    from ansible_collections.gpufleet.resilience.plugins.module_utils.health.model import ACTION_ORDER

    for action in ACTION_ORDER[1:]:
        assert plans.plan_for(action).phases[-1] == "record"


def test_overrides_apply_and_bad_ones_name_their_field():
    assert plans.plan_for("RESTART_APP", {"RESTART_APP": ["notify", "jobs", "record"]}).phases == (
        "notify",
        "jobs",
        "record",
    )
    cases = {
        "plan": ({"REBOOT": ["record"]}, "remediation_plans.REBOOT"),
        "phase": ({"IGNORE": ["notify", "dance", "record"]}, "remediation_plans.IGNORE[1]"),
        "order": ({"IGNORE": ["record", "notify"]}, "remediation_plans.IGNORE"),
        "record last": ({"IGNORE": ["notify"]}, "remediation_plans.IGNORE"),
        "breaker": ({"BREAKER_OPEN": ["fence", "quarantine", "record"]}, "remediation_plans.BREAKER_OPEN"),
    }
    for _name, (override, field) in cases.items():
        with pytest.raises(FieldError) as error:
            plans.plan_for("IGNORE", override)
        assert error.value.field == field


# -- escalation --------------------------------------------------------------------------------------
DAY = 86400.0


def test_escalation_after_too_many_remediations():
    policy = escalation.EscalationPolicy(max_remediations=3, window_days=7)
    history = [
        {"id": "a", "at": 0, "reason": "Xid48", "action": "RESET_GPU"},
        {"id": "b", "at": DAY, "reason": "Xid13", "action": "RESTART_APP"},
        {"id": "c", "at": 2 * DAY, "reason": "Xid62", "action": "RESET_GPU"},
    ]
    assert not escalation.decide(history[:1], 3 * DAY, "Xid79", policy).hold
    decision = escalation.decide(
        [*history, {"id": "d", "at": 2.5 * DAY, "reason": "Xid64", "action": "RESET_GPU"}], 3 * DAY, "Xid79", policy
    )
    assert decision.hold and "4 remediations" in decision.why
    # Old ones drop out of the window.
    assert not escalation.decide(history, 20 * DAY, "Xid79", policy).hold


def test_escalation_when_the_same_fault_comes_back_after_a_cure():
    policy = escalation.EscalationPolicy(max_remediations=10)
    history = [{"id": "a", "at": 0, "reason": "Xid79", "action": "RESTART_BM"}]
    assert escalation.decide(history, DAY, "Xid79", policy).hold
    assert not escalation.decide(history, DAY, "Xid48", policy).hold
    assert not escalation.decide(history, DAY, "Xid79", escalation.EscalationPolicy(repeat_after_cure=False)).hold
    # The remediation being decided is not its own history.
    assert not escalation.decide(history, DAY, "Xid79", policy, remediation_id="a").hold


def test_escalation_settings_are_checked():
    with pytest.raises(FieldError) as error:
        escalation.EscalationPolicy.from_dict({"max_remediations": 0})
    assert error.value.field == "remediation_escalation.max_remediations"
    with pytest.raises(FieldError):
        escalation.EscalationPolicy.from_dict({"max_remedations": 3})


# -- breaker -----------------------------------------------------------------------------------------
def test_breaker_cap_is_the_smaller_of_percent_and_count_never_zero():
    policy = breaker.BreakerPolicy(max_percent=20, max_nodes=10)
    assert [policy.cap(n) for n in (1, 4, 10, 50, 1000)] == [1, 1, 2, 10, 10]


def test_the_default_cap_lets_two_nodes_of_an_eight_node_pool_through():
    policy = breaker.BreakerPolicy.from_dict({})
    assert [policy.cap(n) for n in (4, 8, 16)] == [1, 2, 4]
    state, granted = breaker.BreakerState(), []
    for index in range(3):
        state, decision = breaker.take_slot(state, "n%d" % index, "r%d" % index, 100.0 + index, 8, policy)
        granted.append(decision.granted)
    assert granted == [True, True, False] and state.tripped


def test_refused_nodes_stay_listed_once_each_until_one_of_their_remediations_is_granted():
    policy = breaker.BreakerPolicy(max_percent=100, max_nodes=1, window_s=600)
    state, _first = breaker.take_slot(breaker.BreakerState(), "n1", "r1", 0.0, 4, policy)
    state, _trip = breaker.take_slot(state, "n2", "r2", 1.0, 4, policy)
    state, _again = breaker.take_slot(state, "n2", "r2b", 2.0, 4, policy)  # n2's alert repeats
    state, _other = breaker.take_slot(state, "n3", "r3", 3.0, 4, policy)
    assert [(entry["node"], entry["id"]) for entry in state.refused] == [("n2", "r2b"), ("n3", "r3")]
    # The reset closes the breaker and keeps the list: the reset playbook names them.
    state = breaker.reset(state, clear_slots=True)
    assert not state.tripped and [entry["node"] for entry in state.refused] == ["n2", "n3"]
    state, decision = breaker.take_slot(state, "n3", "r3c", 4.0, 4, policy)
    assert decision.granted and [entry["node"] for entry in state.refused] == ["n2"]


def test_the_cap_counts_nodes_not_runs_a_node_remediated_again_takes_no_second_slot():
    # Four GPU nodes, cap one: the node whose fault came back (the repeat drill: cured, then held)
    # is granted again inside the window; another node is still refused and trips the breaker.
    policy = breaker.BreakerPolicy()
    state, cure = breaker.take_slot(breaker.BreakerState(), "n1", "r1", 0.0, 4, policy)
    state, again = breaker.take_slot(state, "n1", "r1b", 60.0, 4, policy)
    assert cure.granted and again.granted and not state.tripped and again.in_window == 1
    assert again.why == "n1 already holds a slot in the window (1 of 1 nodes)"
    state, other = breaker.take_slot(state, "n2", "r2", 61.0, 4, policy)
    assert not other.granted and other.tripped_now and "1 of 4 GPU nodes already taken out" in other.why
    # Open, it refuses the node with a slot too: a storm is a reason to look.
    state, while_open = breaker.take_slot(state, "n1", "r1c", 62.0, 4, policy)
    assert not while_open.granted


def test_a_reset_takes_off_only_the_refused_nodes_that_are_gone():
    policy = breaker.BreakerPolicy(max_percent=100, max_nodes=1, window_s=600)
    state, _first = breaker.take_slot(breaker.BreakerState(), "n1", "r1", 0.0, 4, policy)
    for index, node in enumerate(["n2", "n3", "n4"]):
        state, _refused = breaker.take_slot(state, node, "r%d" % (index + 2), 1.0 + index, 4, policy)
    state = breaker.reset(state, gone=["n3", "not-listed"])
    assert not state.tripped and [entry["node"] for entry in state.refused] == ["n2", "n4"]
    assert [slot["node"] for slot in state.as_data()["slots"]] == ["n1"]


def test_fence_when_open_is_a_flag():
    assert breaker.BreakerPolicy.from_dict({"fence_when_open": False}).fence_when_open is False
    with pytest.raises(FieldError) as error:
        breaker.BreakerPolicy.from_dict({"fence_when_open": "no"})
    assert error.value.field == "remediation_breaker.fence_when_open"


def test_breaker_trips_at_the_cap_and_stays_open():
    policy = breaker.BreakerPolicy(max_percent=50, max_nodes=10, window_s=600)
    state = breaker.BreakerState()
    granted = []
    for index, node in enumerate(["n1", "n2", "n3", "n4"]):
        state, decision = breaker.take_slot(state, node, "r%d" % index, 100.0 + index, 5, policy)
        granted.append(decision.granted)
        if node == "n3":
            assert decision.tripped_now
    assert granted == [True, True, False, False]
    assert state.tripped
    # The window passing does not close a tripped breaker; a reset does.
    state, decision = breaker.take_slot(state, "n5", "r5", 10_000.0, 5, policy)
    assert not decision.granted
    state = breaker.reset(state, clear_slots=True)
    state, decision = breaker.take_slot(state, "n5", "r5", 10_000.0, 5, policy)
    assert decision.granted


def test_a_resumed_remediation_keeps_its_slot():
    policy = breaker.BreakerPolicy(max_percent=100, max_nodes=1)
    state, first = breaker.take_slot(breaker.BreakerState(), "n1", "r1", 0.0, 4, policy)
    again, second = breaker.take_slot(state, "n1", "r1", 1.0, 4, policy)
    assert first.granted and second.granted and again == state


def test_breaker_window_frees_slots():
    policy = breaker.BreakerPolicy(max_percent=100, max_nodes=1, window_s=60)
    state, _decision = breaker.take_slot(breaker.BreakerState(), "n1", "r1", 0.0, 4, policy)
    _state, decision = breaker.take_slot(state, "n2", "r2", 61.0, 4, policy)
    assert decision.granted


def test_breaker_state_round_trips_through_json():
    state, _decision = breaker.take_slot(breaker.BreakerState(), "n1", "r1", 0.0, 4, breaker.BreakerPolicy())
    assert breaker.BreakerState.from_data(json.loads(json.dumps(state.as_data()))) == state


def test_breaker_settings_are_checked():
    with pytest.raises(FieldError) as error:
        breaker.BreakerPolicy.from_dict({"max_percent": 0})
    assert error.value.field == "remediation_breaker.max_percent"


# -- progress and record -----------------------------------------------------------------------------
def _progress():
    fault = fault_from_condition(XID79)
    return progress.new_progress(
        "r-1",
        "gpu-a-003",
        plans.plan_for("RESTART_BM"),
        fault.as_dict(),
        {"source": "alertmanager"},
        100.0,
        {"host": "h", "pid": 1},
    )


def test_progress_marks_phases_once_and_knows_what_is_left():
    doc = progress.mark_phase(_progress(), "fence", {"changed": True}, 101.0)
    assert progress.pending(doc)[0] == "quarantine"
    again = progress.mark_phase(doc, "fence", {"changed": False}, 200.0)
    assert again["phases"]["fence"] == {"start": 100.0, "end": 101.0, "outcome": {"changed": True}}
    doc = progress.mark_phase(doc, "quarantine", {}, 103.0)
    assert doc["phases"]["quarantine"]["start"] == 101.0


def test_a_stop_skips_every_later_phase_but_the_record():
    doc = _progress()
    for phase in ("fence", "quarantine", "notify", "jobs", "down"):
        doc = progress.mark_phase(doc, phase, {}, 101.0)
    doc = progress.mark_phase(doc, "opt_out", {"opted_out": True}, 102.0, stop="opted out by label")
    assert progress.pending(doc) == ["record"]
    assert doc["phases"]["drain"]["outcome"] == {"skipped": True, "why": "opted out by label"}


def test_phase_not_in_the_plan_is_refused():
    with pytest.raises(FieldError):
        progress.mark_phase(_progress(), "reset_gpu", {}, 1.0)


def test_audit_record_holds_the_timeline_and_jobs(tmp_path):
    doc = _progress()
    jobs = [{"job_id": "7", "fate": "left", "state": "PENDING"}]
    for phase in plans.plan_for("RESTART_BM").phases:
        doc = progress.mark_phase(doc, phase, {"jobs": jobs} if phase == "jobs" else {}, 110.0)
    doc = progress.finish(doc, "succeeded", 111.0)
    audit = records.audit_record(doc)
    assert [entry["phase"] for entry in audit["timeline"]] == list(plans.plan_for("RESTART_BM").phases)
    assert audit["jobs"] == jobs and audit["duration_s"] == 11.0 and audit["trigger"] == {"source": "alertmanager"}
    path = str(tmp_path / "audit" / "remediations.jsonl")
    assert records.append_record(path, audit)
    assert not records.append_record(path, audit)
    assert records.read_records(path, "gpu-a-003") == [json.loads(json.dumps(audit))]
    assert "No action required" in records.end_text(audit)
    assert records.end_text(audit).endswith(
        "Timeline: ansible-playbook playbooks/fleet-status.yml -e fleet_status_node=%s "
        "-e fleet_status_remediation_id=%s" % (audit["node"], audit["id"]))
