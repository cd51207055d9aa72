"""The chaos engine's pure parts and the GPU fault family against a real fake-GPU state directory:
the safety gate, the ledger, the experiments table, scoring, and the observation loop driven by
fake probes (our own interface)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos import (
    api,
    experiments,
    gate,
    gpu_fault,
    ledger,
    observe,
    scoring,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos.context import FaultContext
from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.lab import fake_gpu_state

OPTED = {gate.OPT_IN_LABEL: gate.OPT_IN_VALUE}


def node(name, pool="gpu-a", opted=True):
    return {"name": name, "labels": dict(OPTED) if opted else {}, "pool": pool}


# -- gate --------------------------------------------------------------------------------------
def test_gate_passes_one_opted_in_node():
    assert gate.refusals([node("n1")], {"gpu-a": 4}, gate.Rails(), 60) == []


def test_gate_refuses_a_node_that_did_not_opt_in_unless_the_inventory_lists_it():
    refused = gate.refusals([node("n1", opted=False)], {"gpu-a": 4}, gate.Rails(), 60)
    assert [r["field"] for r in refused] == ["target"] and "gpufleet.io/chaos=allowed" in refused[0]["why"]
    assert gate.refusals([node("n1", opted=False)], {"gpu-a": 4}, gate.Rails(), 60, allowed_nodes=["n1"]) == []


def test_gate_blast_radius_counts_and_percent():
    rails = gate.Rails(max_nodes=3, max_percent=25)
    refused = gate.refusals([node("n1"), node("n2")], {"gpu-a": 4}, rails, 60)
    assert [r["field"] for r in refused] == ["blast_radius.max_percent"]
    refused = gate.refusals([node("n%d" % i) for i in range(4)], {"gpu-a": 40}, rails, 60)
    assert [r["field"] for r in refused] == ["blast_radius.max_nodes"]
    # Never below one node: a pool of two at 25 % still allows one.
    assert gate.refusals([node("n1")], {"gpu-a": 2}, rails, 60) == []


def test_gate_duration_kill_switch_and_busy_targets():
    fields = [r["field"] for r in gate.refusals([node("n1")], {}, gate.Rails(max_duration_s=100), 0)]
    assert fields == ["duration"]
    fields = [r["field"] for r in gate.refusals([node("n1")], {}, gate.Rails(max_duration_s=100), 101)]
    assert fields == ["duration"]
    refused = gate.refusals([node("n1")], {}, gate.Rails(), 60, kill_switch={"on": True, "by": "me", "why": "incident"})
    assert refused[0]["field"] == "kill_switch" and "incident" in refused[0]["why"]
    refused = gate.refusals([node("n1")], {}, gate.Rails(), 60, busy=[{"id": "f-1", "node": "n1", "kind": "fault"}])
    assert refused == [{"field": "target", "why": "n1 already has an active chaos fault (f-1)"}]
    assert gate.refusals([], {}, gate.Rails(), 60)[0]["field"] == "target"


@pytest.mark.parametrize("blast, field", [
    ({"max_nodes": 0}, "blast_radius.max_nodes"),
    ({"max_percent": 0}, "blast_radius.max_percent"),
    ({"max_percent": 101}, "blast_radius.max_percent"),
    ({"bogus": 1}, "blast_radius.bogus"),
])
def test_rails_name_the_bad_field(blast, field):
    with pytest.raises(FieldError) as caught:
        gate.Rails.from_dict(blast)
    assert caught.value.field == field


# -- ledger ------------------------------------------------------------------------------------
def test_ledger_lifecycle_and_completeness():
    data = ledger.add_drill({}, {"id": "d-1", "targets": ["n1"]})
    data = ledger.add_fault(data, {"id": "f-1", "drill": "d-1", "node": "n1", "expires_at": 100.0})
    assert ledger.faults(data)["f-1"]["state"] == "injecting"
    data = ledger.activate(data, "f-1", {"x": 1}, 10.0)
    assert ledger.faults(data)["f-1"]["state"] == "active"
    assert [e["kind"] for e in ledger.active_on(data, ["n1"])] == ["fault", "drill"]
    assert ledger.expired(data, 99.0) == [] and [f["id"] for f in ledger.expired(data, 100.0)] == ["f-1"]
    data = ledger.record_attempt(data, "f-1", "boom", 101.0)
    assert ledger.faults(data)["f-1"]["state"] == "rollback_failed"
    data = ledger.finish(data, "f-1", "expiry", 102.0, ["restored"])
    assert ledger.faults(data) == {} and ledger.history(data)[0]["rolled_back_by"] == "expiry"
    assert ledger.completeness(data) == {"rolled_back": 1, "still_active": 0, "by_watchdog": 1, "by_kill_switch": 0}
    data = ledger.remove_drill(data, "d-1")
    assert ledger.active_on(data, ["n1"]) == []


def test_ledger_history_is_bounded():
    data = {}
    for index in range(ledger.HISTORY_KEEP + 5):
        data = ledger.add_fault(data, {"id": "f-%d" % index})
        data = ledger.finish(data, "f-%d" % index, "drill", float(index))
    assert len(ledger.history(data)) == ledger.HISTORY_KEEP
    assert ledger.history(data)[-1]["id"] == "f-%d" % (ledger.HISTORY_KEEP + 4)


def test_file_store_updates_atomically(tmp_path):
    store = ledger.FileStore(str(tmp_path / "state" / "ledger.json"))
    assert store.read() == ({}, None)
    store.update(lambda d: (ledger.set_kill_switch(d, True, "me", "why", 1.0), None))
    assert ledger.kill_switch(store.read()[0])["on"] is True
    assert store.update(lambda d: (None, "answer")) == "answer"
    (tmp_path / "state" / "ledger.json").write_text("{not json")
    with pytest.raises(Exception, match="not valid JSON"):
        store.read()


# -- experiments -------------------------------------------------------------------------------
def test_every_experiment_names_a_family_and_its_loop():
    for name in experiments.names():
        experiment = experiments.get(name)
        family = api.family_module(experiment.family)
        assert all(callable(getattr(family, step, None)) for step in ("plan", "inject", "revert")), name
        expect = experiments.loop_expectations(experiment, dict(experiment.params))
        # A fault no alert rule covers must say what to add: that is the drill's gap finding.
        assert expect["alerts"] or expect["missing_alert_hint"], name
    with pytest.raises(FieldError) as caught:
        experiments.get("gpu_meltdown")
    assert caught.value.field == "experiment"


def test_xid_expectations_follow_the_catalog():
    fatal = experiments.loop_expectations(experiments.get("gpu_xid"), {"xid_severity": "fatal"})
    assert fatal["alerts"] == ["GpuNodeFatal"] and fatal["fences"] and fatal["requeues"]
    benign = experiments.loop_expectations(experiments.get("gpu_xid"), {"xid_severity": "non-fatal"})
    assert benign["alerts"] == ["GpuNodeDegraded"] and not benign["fences"]


def test_deadlines_are_checked():
    assert experiments.deadlines({"alerted": 5})["alerted"] == 5.0
    for bad, field in (({"alerted": 0}, "deadlines.alerted"), ({"later": 1}, "deadlines.later")):
        with pytest.raises(FieldError) as caught:
            experiments.deadlines(bad)
        assert caught.value.field == field


# -- GPU faults --------------------------------------------------------------------------------
@pytest.fixture()
def lab(tmp_path):
    state_dir = tmp_path / "gpus" / "n1"
    state_dir.mkdir(parents=True)
    fake_gpu_state.init(str(state_dir), 8, "n1", "NVIDIA-H100-80GB-HBM3")
    (tmp_path / "kmsg").mkdir()
    (tmp_path / "run").mkdir()
    return tmp_path


def gpu_files(state_dir: Path) -> dict:
    return {p.name: p.read_bytes() for p in sorted(state_dir.glob("gpu*.state"))}


@pytest.mark.parametrize("experiment", [n for n in experiments.names() if experiments.get(n).family == "gpu_fault"])
def test_each_gpu_fault_injects_and_reverts_byte_identical(lab, experiment):
    state_dir = lab / "gpus" / "n1"
    before = gpu_files(state_dir)
    spec = {"experiment": experiment, "node": "n1", "backend": "default", "params": {"gpu": 2},
            "fault_id": "f-1", "lab_dir": str(lab)}
    ctx = FaultContext.of(lab_dir=str(lab))
    planned = gpu_fault.plan(spec)
    assert planned["actions"] and planned["simulated"]
    undo = gpu_fault.inject(spec, ctx)
    json.dumps(undo)  # it goes into the ledger
    after = fake_gpu_state.read(str(state_dir))
    changed = before != gpu_files(state_dir) or after["pending_events"]
    assert changed, "%s changed nothing" % experiment
    assert [p["gpu"] for p in after["pending_events"]] in ([], [2])
    if "kmsg" in undo["backends"]:
        text = (lab / "kmsg" / "n1.log").read_text()
        assert "NVRM: " in text and after["gpus"][2]["pci_bus_id"].split(":", 1)[1] in text
    reverted = gpu_fault.revert(dict(spec, **undo), ctx)
    assert gpu_files(state_dir) == before, reverted
    assert fake_gpu_state.read(str(state_dir))["pending_events"] == []


def test_xid_line_is_what_the_agents_kernel_log_parser_reads(lab):
    from ansible_collections.gpufleet.resilience.plugins.module_utils.health.kernel_log import parse_kernel_log

    spec = {"experiment": "gpu_xid", "node": "n1", "params": {"xid": 79, "gpu": 1}, "lab_dir": str(lab)}
    gpu_fault.inject(spec, FaultContext.of(lab_dir=str(lab)))
    events = parse_kernel_log((lab / "kmsg" / "n1.log").read_text().splitlines())
    assert [e.xid for e in events] == [79]


def test_revert_after_a_crash_mid_inject_restores_health(lab):
    state_dir = str(lab / "gpus" / "n1")
    before = gpu_files(lab / "gpus" / "n1")
    fake_gpu_state.set_fields(state_dir, 0, temperature=99)  # the half-done injection
    spec = {"experiment": "gpu_thermal", "node": "n1", "params": {}, "lab_dir": str(lab)}
    gpu_fault.revert(spec, FaultContext.of(lab_dir=str(lab)))  # no undo was recorded
    assert gpu_files(lab / "gpus" / "n1") == before


def test_dcgm_commands_use_numeric_fields_and_an_explicit_gpu():
    fault = gpu_fault.Fault("gpu_ecc_dbe", {"gpu": 0, "count": 2})
    assert fault.dcgm_commands() == [["dcgmi", "test", "--inject", "--gpuid", "0", "-f", "311", "-v", "2"]]
    assert fault.dcgm_commands(healthy=True)[0][-1] == "0"
    assert gpu_fault.Fault("gpu_xid", {"xid": 48}).dcgm_commands()[0][6:] == ["230", "-v", "48"]


def test_gpu_fault_bad_input_names_the_field(lab):
    for params, field in (({"xid": "x"}, "params.xid"), ({"gpu": 99}, "params.gpu")):
        with pytest.raises(FieldError) as caught:
            gpu_fault.Fault("gpu_xid", params)
        assert caught.value.field == field
    with pytest.raises(FieldError) as caught:
        gpu_fault.plan({"experiment": "gpu_xid", "node": "n1", "backend": "nvml_sim+smoke", "params": {},
                        "lab_dir": str(lab)})
    assert caught.value.field == "backend"
    with pytest.raises(FieldError, match="real GPUs"):
        gpu_fault.plan({"experiment": "gpu_xid", "node": "n1", "backend": "nvml_sim", "params": {}})
    with pytest.raises(FieldError) as caught:
        gpu_fault.inject({"experiment": "gpu_xid", "node": "n1", "params": {"gpu": 9}},
                         FaultContext.of(lab_dir=str(lab)))
    assert caught.value.field == "params.gpu"
    assert not os.path.exists(lab / "kmsg" / "n1.log")


# -- scoring -----------------------------------------------------------------------------------
TRAIN = """start time=100.0 step=0 steps=1000
step time=101.0 step=1 state=ab
checkpoint time=101.1 step=20 file=ckpt-000000020.json
step time=110.0 step=23 state=ab
interrupted time=110.5 step=23 signal=SIGTERM checkpoint=ckpt-000000023.json exit=75
resume time=120.0 step=23 source=ckpt-000000023.json steps=1000
step time=120.1 step=24 state=ab
"""


def test_recovery_from_train_sim_output():
    found = scoring.recovery(TRAIN, 105.0)
    assert found["resumed"] and found["resumed_step"] == 23 and found["steps_lost"] == 0
    assert found["interrupted_at"] == 110.5
    lost = scoring.recovery(TRAIN.replace("resume time=120.0 step=23", "resume time=120.0 step=20"), 105.0)
    assert lost["steps_lost"] == 3
    assert scoring.recovery(TRAIN, 125.0)["resumed"] is False
    # 22 steps in 9 s before the fault (the step after the resume does not count).
    assert found["step_s"] == pytest.approx(9 / 22)


def test_what_the_fault_cost_the_protected_job():
    lost = dict(scoring.recovery(TRAIN.replace("resume time=120.0 step=23", "resume time=120.0 step=20"), 105.0),
                gpus=8)
    # 8 GPUs for the 15 s from the fault to the resume, and again for the 3 steps it redoes.
    assert scoring.job_gpu_hours(lost, 15.0) == pytest.approx(8 * (15 + 3 * 9 / 22) / 3600, abs=1e-6)
    assert scoring.job_gpu_hours(dict(lost, gpus=None), 15.0) is None
    assert scoring.job_gpu_hours(dict(lost, resumed=False), 15.0) is None
    assert scoring.step_seconds([{"event": "step", "time": 1.0, "step": "5"}]) is None


def test_document_scores_and_lists_gaps():
    steps = [scoring.step("detected", "pass", "", "", 30, 12.0, 10.0),
             scoring.step("alerted", "fail", "", "none", 90, None, 10.0),
             scoring.step("scheduler", "skipped", "", "", 180, None, 10.0),
             scoring.step("recovered", "skipped", "", "", 300, None, 10.0)]
    expect = {"detection": {"query": "q"}, "alerts": [], "missing_alert_hint": "an alert on power"}
    observed = {"steps": steps, "gaps": scoring.gaps(steps, "gpu_power", expect), "events": [],
                "metrics": scoring.metrics(steps, {})}
    drill = {"id": "d-1", "experiment": "gpu_power", "family": "gpu_fault", "targets": ["n1"], "started_at": 9.0}
    doc = scoring.document(drill, [{"phase": "rollback", "ok": True}], observed,
                           [{"id": "f-1", "node": "n1", "rollback": "done", "rolled_back_at": 50.0}], 60.0)
    assert doc["result"] == "failed" and doc["gaps"][0]["add"] == "an alert on power"
    assert doc["metrics"]["time_to_detect_s"] == 2.0 and doc["metrics"]["time_to_alert_s"] is None
    assert [e["name"] for e in doc["events"]] == ["rollback"]
    doc = scoring.document(drill, [{"phase": "rollback", "ok": True}], observed,
                           [{"id": "f-1", "node": "n1", "rollback": "failed"}], 60.0)
    assert any("not rolled back" in f for f in doc["findings"])


# -- the observation loop (fake probes: our own interface) --------------------------------------
class FakeProbes(observe.Probes):
    def __init__(self, script):
        super().__init__("http://prom", None, None, None, "ns", lambda path: "")
        self.script = script
        self.clock = 0.0

    def kube_fenced(self, node):
        return "cordoned" if self.clock >= self.script["fence_at"] else None

    def slurm_fenced(self, node):
        return "DOWN (gpufleet)" if self.clock >= self.script["fence_at"] else None

    def job(self, job_id):
        return None


def test_observe_decides_each_step_by_its_deadline(monkeypatch):
    probes = FakeProbes({"fence_at": 5.0})
    monkeypatch.setattr(observe, "detection_value", lambda url, det, n, params: 1.0 if probes.clock >= 2 else 0.0)
    # Prometheus's range query puts the crossing between two polls, before the loop saw it.
    monkeypatch.setattr(observe, "first_above", lambda url, query, since, until, level, strict: 1.5)

    def sleep(seconds):
        probes.clock += seconds

    request = {"nodes": ["n1"], "experiment": "gpu_xid", "injected_at": 0.0, "poll_s": 1.0,
               "deadlines": {"detected": 10, "alerted": 10, "scheduler": 10, "recovered": 10},
               "expectations": {"detection": {"query": "q", "mode": "rise", "threshold": 1, "what": "xid"},
                                "alerts": ["GpuNodeFatal"], "fences": True, "requeues": True},
               "baseline": {"detection": {"n1": 0.0}}}
    seen = observe.observe(request, probes, clock=lambda: probes.clock, sleep=sleep)
    verdicts = {s["step"]: s["verdict"] for s in seen["steps"]}
    # No Alertmanager URL: the alert is never seen, and that is a finding, not an exception.
    assert verdicts == {"detected": "pass", "alerted": "fail", "scheduler": "pass", "recovered": "not_observable"}
    assert seen["metrics"]["time_to_detect_s"] == 1.5 and seen["metrics"]["time_to_quarantine_s"] == 5.0
    assert [g["step"] for g in seen["gaps"]] == ["alerted"]
    assert [e["name"] for e in seen["events"]] == ["inject", "detect", "quarantine"]


def test_a_fault_nothing_recovers_from_reports_it_without_waiting_for_the_deadline(monkeypatch):
    probes = FakeProbes({"fence_at": 1e9})
    monkeypatch.setattr(observe, "detection_value", lambda url, det, n, params: 1.0 if probes.clock >= 2 else 0.0)
    monkeypatch.setattr(observe, "first_above", lambda url, query, since, until, level, strict: 2.0)

    def sleep(seconds):
        probes.clock += seconds

    # An experiment nothing recovers from (Experiment.no_recovery): job_hang as it was before its plan.
    expect = dict(experiments.loop_expectations(experiments.get("job_hang"), {"job_id": "42"}), requeues=False,
                  no_recovery="no remediation acts on a hung job (JOB_HANG off)")
    request = {"nodes": ["n1"], "experiment": "job_hang", "injected_at": 0.0, "poll_s": 1.0,
               "protected_job": "42", "params": {"job_id": "42"},
               "deadlines": {"detected": 10, "alerted": 10, "scheduler": 10, "recovered": 300},
               "expectations": expect, "baseline": {"detection": {"n1": 0.0}}}
    seen = observe.observe(request, probes, clock=lambda: probes.clock, sleep=sleep)
    steps = {s["step"]: s for s in seen["steps"]}
    assert {name: step["verdict"] for name, step in steps.items()} == {
        "detected": "pass", "alerted": "fail", "scheduler": "skipped", "recovered": "not_observable"}
    assert steps["recovered"]["expected"] == "job 42 makes progress again"
    assert "JOB_HANG" in steps["recovered"]["observed"]
    assert probes.clock <= 11  # ended at the alert's deadline, not at recovered's 300 s
    assert [g["step"] for g in seen["gaps"]] == ["alerted", "recovered"]


def test_a_watch_in_slices_says_where_it_is_and_ends_as_one_watch(monkeypatch):
    monkeypatch.setattr(observe, "first_above", lambda url, query, since, until, level, strict: 1.5)
    request = {"nodes": ["n1"], "experiment": "gpu_xid", "injected_at": 0.0, "poll_s": 1.0,
               "deadlines": {"detected": 10, "alerted": 10, "scheduler": 10, "recovered": 10},
               "expectations": {"detection": {"query": "q", "mode": "rise", "threshold": 1, "what": "xid"},
                                "alerts": ["GpuNodeFatal"], "fences": True, "requeues": True},
               "baseline": {"detection": {"n1": 0.0}}}

    def watch(sliced):
        probes = FakeProbes({"fence_at": 5.0})
        monkeypatch.setattr(observe, "detection_value", lambda url, det, n, params: 1.0 if probes.clock >= 2 else 0.0)

        def sleep(seconds):
            probes.clock += seconds

        if not sliced:
            return observe.observe(request, probes, clock=lambda: probes.clock, sleep=sleep), []
        lines, carry = [], None
        while True:
            seen = observe.observe(request, probes, clock=lambda: probes.clock, sleep=sleep, carry=carry,
                                   until=probes.clock + 3)
            lines.append(seen["progress"])
            if seen["done"]:
                return seen, lines
            carry = json.loads(json.dumps(seen["carry"]))  # through Ansible: plain data

    whole = watch(sliced=False)[0]
    sliced, lines = watch(sliced=True)
    assert sliced["steps"] == whole["steps"] and sliced["events"] == whole["events"]
    assert sliced["metrics"] == whole["metrics"]
    assert lines[0].startswith("at 3 s: detected at 1.5 s, recovered not_observable; "
                               "waiting for alerted (deadline 10 s")
    assert "scheduler at 5.0 s" in lines[1] and "waiting for alerted" in lines[1]
    assert lines[-1].endswith("recovered not_observable") and "waiting" not in lines[-1]
    assert len(lines) == 4  # the alert's deadline (10 s) ends it


def test_the_watchdog_reinjects_dcgm_values_while_a_fault_is_active(monkeypatch):
    from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos import api

    ran = []
    monkeypatch.setattr(gpu_fault, "_run", ran.append)
    entry = {"id": "f-1", "family": "gpu_fault", "state": "active", "injected_at": 100.0,
             "spec": {"experiment": "gpu_ecc_dbe", "node": "n1", "params": {"gpu": 0}},
             "undo": {"backends": ["dcgm"], "experiment": "gpu_ecc_dbe", "params": {"gpu": 0, "count": 1}}}
    last = {}
    api.reinject_expiring(entry, last, 110.0)
    assert ran == []  # the injection itself was 10 s ago
    api.reinject_expiring(entry, last, 131.0)
    assert ran == [["dcgmi", "test", "--inject", "--gpuid", "0", "-f", "311", "-v", "1"]]
    api.reinject_expiring(entry, last, 140.0)
    assert len(ran) == 1
    api.reinject_expiring(dict(entry, undo={"backends": ["nvml_sim"]}), {}, 500.0)
    assert len(ran) == 1


def test_recovery_of_a_job_killed_without_a_word():
    text = ("checkpoint_begin time=101.0 step=20 file=ckpt-000000020.json\n"
            "checkpoint time=101.5 step=20 file=ckpt-000000020.json\n"
            "step time=104.0 step=25 state=ab\n"
            "checkpoint_begin time=105.0 step=30 file=ckpt-000000030.json\n"
            "resume time=120.0 step=20 source=ckpt-000000020.json steps=1000\n")
    found = scoring.recovery(text, 100.0)
    # A routine checkpoint is not the interruption; the last line before the resume is.
    assert found["interrupted_at"] == 105.0 and found["resumed_step"] == 20 and found["steps_lost"] == 10


def test_on_a_real_node_the_xid_line_goes_to_dev_kmsg_at_level_err(tmp_path, monkeypatch):
    kmsg = tmp_path / "kmsg"
    kmsg.write_text("")
    monkeypatch.setattr(gpu_fault, "DEV_KMSG", str(kmsg))
    spec = {"experiment": "gpu_xid", "node": "n1", "backend": "kmsg", "params": {"xid": 79, "pci_bus": "3b:00.0"}}
    undo = gpu_fault.inject(spec, FaultContext())
    assert kmsg.read_text() == ("<3>NVRM: Xid (PCI:0000:3b:00.0): 79, pid='<unknown>', name=<unknown>, "
                                "GPU has fallen off the bus\n")
    # A kernel log cannot be unwritten: the rollback makes the agent forget instead.
    assert undo["kmsg"]["path"] == str(kmsg) and undo["agent_must_forget"] is True


def test_concurrent_drills_add_up_against_the_blast_radius():
    rails = gate.Rails(max_nodes=2, max_percent=50)
    held = [{"name": "n1", "pool": "gpu-a"}]
    # One more node of a 4-node pool: 2 of 4 under chaos, within 50 %.
    assert gate.refusals([node("n2")], {"gpu-a": 4}, rails, 60, under_chaos=held) == []
    refused = gate.refusals([node("n3")], {"gpu-a": 4}, rails, 60,
                            under_chaos=[*held, {"name": "n2", "pool": "gpu-a"}])
    assert [r["field"] for r in refused] == ["blast_radius.max_nodes", "blast_radius.max_percent"]
    assert "already under chaos" in refused[0]["why"]
    # Another pool's drills count against max_nodes, not against this pool's percentage.
    refused = gate.refusals([node("b1", pool="gpu-b")], {"gpu-a": 4, "gpu-b": 4}, gate.Rails(max_nodes=3),
                            60, under_chaos=held)
    assert refused == []


def test_two_drills_gated_at_the_same_moment_are_serialised(tmp_path, monkeypatch):
    from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos import api

    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)  # bare metal: the ledger is a file
    params = {"experiment": "gpu_thermal", "target": "n2", "duration": 60, "params": {},
              "ledger_file": str(tmp_path / "ledger.json"), "allowed_nodes": ["n1", "n2"]}
    first = api.drill_gate(params, False)
    assert first["drill"]["targets"] == ["n2"]
    # The second gate read the ledger before the first registered: the write re-checks and refuses.
    monkeypatch.setattr(api, "_read", lambda store: {})
    with pytest.raises(api.DrillRefused) as caught:
        api.drill_gate(dict(params, target="n1"), False)
    assert caught.value.field == "blast_radius.max_nodes" and "already under chaos" in str(caught.value)
    assert list(ledger.drills(ledger.FileStore(params["ledger_file"]).read()[0])) == [first["drill"]["id"]]


def test_the_api_imports_no_family_until_a_drill_uses_one(child_env):
    """Each chaos module run compiles its imports from the AnsiballZ zip: the gate, the ledger and the
    checks must not pay for the eight families."""
    import json
    import subprocess
    import sys

    prefix = "ansible_collections.gpufleet.resilience.plugins.module_utils.chaos."
    code = ("import json, sys\n"
            "from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos import api\n"
            "before = sorted(m for m in sys.modules if m.startswith(%r))\n"
            "api.family_module('ib_fault')\n"
            "after = sorted(m for m in sys.modules if m.startswith(%r))\n"
            "print(json.dumps([before, after]))\n" % (prefix, prefix))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, env=child_env)
    assert done.returncode == 0, done.stderr[-3000:]
    before, after = json.loads(done.stdout)
    families = {prefix + experiments.get(name).family for name in experiments.names()}
    assert not families & set(before), sorted(families & set(before))
    assert families & set(after) == {prefix + "ib_fault"}
    assert api.family_module("no_such_family") is None
