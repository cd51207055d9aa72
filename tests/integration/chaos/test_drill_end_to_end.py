"""The XID 79 drill with the whole loop on: the drill injects, and the real self-healing loop
(agent -> first responder: fence and quarantine; Prometheus -> Alertmanager -> ansible-rulebook ->
remediate-node.yml: the rest) fences the node,
lets the protected job checkpoint, requeues it, drains and replaces the node; the job resumes on a
healthy node. The drill scores every step green and writes valid reports.

This is the suite's one slow end-to-end path: it is also the remediation loop's end-to-end test.
The job_hang drill runs first on the same loop (one rulebook start for both): a stopped rank's job
is found stalled, GpuJobStalled starts the remediation, and plan JOB_HANG requeues that job alone.
"""

from __future__ import annotations

import json
import re
import threading
import time
import xml.etree.ElementTree as ET

import jsonschema
import pytest
from agent_probe import AgentProbe, firing_alerts, nodes_alerting, wait_for
from drill_probe import Drills, screenshot

from ansible_collections.gpufleet.resilience.plugins.module_utils.report.document import DRILL_SCHEMA

pytestmark = [pytest.mark.integration, pytest.mark.lab]

REPLACE_PHASES = ["fence", "quarantine", "notify", "jobs", "down", "opt_out", "drain", "evidence", "replace",
                  "admit", "record"]


@pytest.fixture(scope="module")
def self_healing(lab):
    """The rulebook on (the test lab runs without it), once for the module's drills; off at its end
    unless a test turned it off already (``state["on"]``)."""
    # A fault an earlier test left would be remediated the moment the rulebook starts.
    wait_for(lambda: not firing_alerts("GpuNodeFatal"), 60, what="no GpuNodeFatal left from an earlier test")
    enabled = lab.playbook("one-click-slurm.yml", "--tags", "self_healing", extra={"self_healing_enabled": True})
    assert enabled.rc == 0, enabled.output[-3000:]
    state = {"on": True}
    yield state
    if state["on"]:
        disable_self_healing(lab, state)


def disable_self_healing(lab, state):
    disabled = lab.playbook("one-click-slurm.yml", "--tags", "self_healing", extra={"self_healing_enabled": False})
    state["on"] = False
    assert disabled.rc == 0, disabled.output[-3000:]


def test_a_stalled_job_is_requeued_alone_and_resumes_from_its_checkpoint(lab, self_healing, tmp_path):
    """job_hang with the loop on: the agent calls the stopped rank's job stalled after the job's own
    3 s window, GpuJobStalled fires for that job and node, the rulebook starts remediate-node.yml
    with the alert, and plan JOB_HANG requeues that job alone (nothing is done to the node); the job
    resumes from its last checkpoint, so the drill scores recovery green."""
    drills = Drills(lab)
    drills.reset_state()
    beat = ("--stall-after-seconds", "3", "--progress-every", "0.5")
    job, node = drills.submit_train_sim(tmp_path / "job", extra=beat)
    drills.opt_in([node])
    probe = AgentProbe(lab, node)
    output = str(tmp_path / "job" / "train.out")
    started = time.time()
    try:
        wait_for(lambda: (probe.sample("gpufleet_job_progress_step", job_id=job, rank="0") or 0) > 0, 30,
                 what="job %s's progress in the agent's metrics" % job)
        assert probe.sample("gpufleet_job_stall_window_seconds", job_id=job) == 3.0
        journal_before = len(probe.journal_records())

        result = drills.drill("job_hang", node, protected_job=job, protected_output=output,
                              chaos_drill_deadlines={"detected": 30, "alerted": 30, "scheduler": 3, "recovered": 180})
        assert result.rc == 0, result.output[-4000:]
        document = drills.report(result)
        steps = {s["step"]: s for s in document["steps"]}
        assert {name: step["verdict"] for name, step in steps.items()} == {
            "detected": "pass", "alerted": "pass", "scheduler": "skipped", "recovered": "pass"}, document
        assert 2 <= steps["detected"]["elapsed_s"] < 30, steps["detected"]  # the 3 s window from the last beat
        assert "GpuJobStalled" in steps["alerted"]["observed"]
        assert not document["gaps"] and [f["rollback"] for f in document["faults"]] == ["done"], document
        stalled = [r for r in probe.journal_records()[journal_before:] if r["reason"] == "JobStalled"]
        assert (stalled[0]["event"], stalled[0]["fault"]["job_id"]) == ("fault", job), stalled

        # -- the remediation the alert started: that job requeued, the node left alone ------------
        record = [r for r in drills.audit(node) if r["started_at"] >= started - 1][-1]
        assert record["result"] == "succeeded" and record["plan"]["name"] == "JOB_HANG", record
        assert record["trigger"]["alert"] == "GpuJobStalled" and record["fault"]["job_ids"] == [job], record
        assert [s["phase"] for s in record["timeline"]] == ["notify", "jobs", "record"]
        jobs = next(s for s in record["timeline"] if s["phase"] == "jobs")["outcome"]["jobs"]
        assert [(j["job_id"], j["fate"]) for j in jobs] == [(job, "requeued")], jobs
        # What it cost: the job's GPU until it ran again; the node never left service.
        assert record["cost"]["node_gpu_hours"] == 0 and record["cost"]["jobs"][0]["gpus"] == 1, record["cost"]
        # From when its alert began firing (Alertmanager's startsAt), before the remediation started.
        assert record["cost"]["fault_at"] == record["fault"]["since"] < record["started_at"], (
            record["cost"], record["trigger"])
        assert drills.slurm_node(node)["State"].split("+")[0] in ("IDLE", "MIXED", "ALLOCATED")
        assert not drills.kube_node(node)["spec"].get("unschedulable")
        state = drills.job(job)
        assert state["JobState"] == "RUNNING" and int(state["Restarts"]) >= 1, state
        # train_sim: the checkpoint before the stop, then "resume step=N" from it.
        resumed = re.findall(r"resume time=\S+ step=(\d+)", Drills.output(tmp_path / "job"))
        assert resumed and int(resumed[-1]) > 0, resumed
        wait_for(lambda: node not in nodes_alerting("GpuJobStalled"), 60, what="GpuJobStalled resolved")
    finally:
        drills.cancel(job)
        drills.opt_in([node], allowed=False)
    # The Epilog removes the job's file on its node: the agent forgets the job.
    wait_for(lambda: probe.sample("gpufleet_job_progress_timestamp_seconds", job_id=job) is None, 60,
             what="job %s's progress file removed at its end" % job)


def test_a_storm_drill_proves_the_breaker_trips_at_its_cap(lab, self_healing):
    """breaker_storm (issue 20, part 5) with the loop on: XID 79 on one node more than the breaker's
    default cap (25 % of the GPU nodes, at least one). The drill scores the trip as its scheduler step:
    the node under the cap quarantined and replaced, the other refused and only fenced in Slurm. Its
    verify takes the open breaker as the expected aftermath and names the reset."""
    drills = Drills(lab)
    drills.reset_state()
    gpu_nodes = len(lab.kube().list_node(label_selector="gpufleet.io/pool").items)
    cap = max(1, min(10, gpu_nodes // 4))
    targets = drills.active_nodes()[: cap + 1]
    assert len(targets) == cap + 1, (gpu_nodes, targets)
    drills.opt_in(targets)
    try:
        result = drills.drill(
            "breaker_storm", ",".join(targets), chaos_drill_abort_conditions=[],
            chaos_drill_blast_radius={"max_nodes": len(targets), "max_percent": 100},
            chaos_drill_deadlines={"detected": 30, "alerted": 30, "scheduler": 240, "recovered": 30},
            chaos_drill_verify_timeout=240,
        )
        assert result.rc == 0, result.output[-5000:]
        document = drills.report(result)
        steps = {s["step"]: s for s in document["steps"]}
        assert steps["scheduler"]["verdict"] == "pass", steps["scheduler"]
        assert steps["detected"]["verdict"] == "pass" and steps["alerted"]["verdict"] == "pass", steps
        assert steps["recovered"]["verdict"] == "not_observable", steps["recovered"]
        assert "breaker" in [e["name"] for e in document["events"]], document["events"]
        breaker = drills.module("remediation_breaker", {"kubeconfig": str(lab.kubeconfig),
                                                        "namespace": "gpufleet-system"})["breaker"]
        refused = sorted({entry["node"] for entry in breaker["refused"]} & set(targets))
        acted = [n for n in targets if n not in refused]
        assert breaker["tripped"] and len(acted) == cap and refused, breaker
        for node in refused:
            state = drills.slurm_node(node)
            assert "DRAIN" in state["State"] and state["Reason"].startswith("gpufleet: "), state
            assert not drills.kube_node(node)["spec"].get("unschedulable"), node
        verify = next(p for p in document["phases"] if p["phase"] == "verify")
        assert verify["ok"], verify
        assert "remediation-reset.yml" in json.dumps(verify["detail"]), verify["detail"]
    finally:
        for node in targets:
            if drills.kube_node(node) is None:
                drills.restore(node)
            drills.heal(node)
        drills.opt_in(targets, allowed=False)
        drills.reset_state()


def test_a_repeat_drill_proves_escalation_holds_the_node(lab, self_healing):
    """gpu_xid_repeat (issue 20, part 5) with the loop on: XID 48 on one node is cured (the GPU reset,
    validated, the node returned: gpu_xid's drill), then the same XID on the same GPU again. Escalation
    holds the node instead of a second reset: the drill scores the hold as its scheduler step and its
    verify takes the fence as the expected aftermath, naming return-node.yml."""
    drills = Drills(lab)
    drills.reset_state()
    node = drills.active_nodes()[0]
    drills.opt_in([node])
    quick = {"chaos_drill_abort_conditions": [], "chaos_drill_verify_timeout": 240,
             "chaos_drill_deadlines": {"detected": 30, "alerted": 30, "scheduler": 120, "recovered": 30}}

    def record_after(count):
        """The node's first audit record after its first ``count`` (the log outlives a test)."""
        return wait_for(lambda: (drills.audit(node)[count:] or [None])[0], 60, what="an audit record of %s" % node)

    try:
        records = len(drills.audit(node))
        cure = drills.drill("gpu_xid", node, xid=48, gpu=1, **quick)
        assert cure.rc == 0, cure.output[-5000:]
        cured = drills.report(cure)
        assert next(p for p in cured["phases"] if p["phase"] == "verify")["ok"], cured["phases"]
        first = record_after(records)
        assert first["plan"]["name"] == "RESET_GPU" and first["result"] == "succeeded", first

        repeat = drills.drill("gpu_xid_repeat", node, gpu=1, **quick)
        assert repeat.rc == 0, repeat.output[-5000:]
        document = drills.report(repeat)
        steps = {s["step"]: s for s in document["steps"]}
        assert steps["detected"]["verdict"] == "pass" and steps["alerted"]["verdict"] == "pass", steps
        assert steps["scheduler"]["verdict"] == "pass", steps["scheduler"]
        assert steps["recovered"]["verdict"] == "not_observable", steps["recovered"]
        escalation = next(e for e in document["events"] if e["name"] == "escalation")
        assert "came back after remediation %s (RESET_GPU)" % first["id"] in escalation["detail"], escalation
        # Held, not reset again: fenced in Slurm and cordoned, its run's plan HOLD.
        held = record_after(records + 1)
        assert held["plan"]["name"] == "HOLD" and "reset_gpu" not in [s["phase"] for s in held["timeline"]], held
        assert "DRAIN" in drills.slurm_node(node)["State"] and drills.kube_node(node)["spec"].get("unschedulable")
        verify = next(p for p in document["phases"] if p["phase"] == "verify")
        assert verify["ok"] and "return-node.yml" in json.dumps(verify["detail"]), verify
    finally:
        # A heal while the hold's run is still going would be undone by its later phases (down, hold).
        try:
            wait_for(lambda: ((drills.progress(node) or {}).get("finished_at") or not drills.progress(node)), 120,
                     what="the remediation of %s finished" % node)
        finally:
            drills.heal(node)
        drills.opt_in([node], allowed=False)
        drills.reset_state()


def test_xid79_drill_end_to_end_every_loop_step_green(lab, self_healing, tmp_path):
    drills = Drills(lab)
    drills.reset_state()
    job, node = drills.submit_train_sim(tmp_path / "job")
    drills.opt_in([node])
    seen = {"down": None, "cordoned": None}
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            slurm = drills.slurm_node(node) if seen["down"] is None else {}
            if slurm.get("State", "").startswith("DOWN") and "gpufleet: Xid79" in slurm.get("Reason", ""):
                seen["down"] = (time.time(), slurm["Reason"])
            kube = drills.kube_node(node) if seen["cordoned"] is None else None
            if kube and kube["spec"].get("unschedulable") and any(
                    t["key"] == "gpufleet.io/gpu-unhealthy" for t in kube["spec"].get("taints") or []):
                seen["cordoned"] = time.time()
            time.sleep(0.1)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    started = time.time()
    try:
        result = drills.drill(
            "gpu_xid", node, xid=79, gpu=2, protected_job=job, protected_output=str(tmp_path / "job" / "train.out"),
            chaos_drill_deadlines={"detected": 30, "alerted": 30, "scheduler": 120, "recovered": 240},
        )
        stop.set()
        assert result.rc == 0, result.output[-5000:]
        document = drills.report(result)
        # -- the drill: every loop step green, the times, no work lost beyond the checkpoint -------
        steps = {s["step"]: s["verdict"] for s in document["steps"]}
        assert steps == {"detected": "pass", "alerted": "pass", "scheduler": "pass", "recovered": "pass"}, document
        assert document["result"] == "passed" and not document["gaps"] and not document["findings"], document
        metrics = document["metrics"]
        # Detection is timed to the range query's step (0.1 s), the alert by its own startsAt.
        assert 0 <= metrics["time_to_detect_s"] <= metrics["time_to_alert_s"] + 0.2
        assert metrics["time_to_alert_s"] <= metrics["time_to_recover_s"]
        assert metrics["steps_lost"] == 0, metrics
        # The job's one GPU from the fault until it resumed; no step to redo.
        assert metrics["job_gpu_hours_lost"] == pytest.approx(metrics["time_to_recover_s"] / 3600, abs=1e-5), metrics
        names = [e["name"] for e in document["events"]]
        for name in ("inject", "detect", "alert", "quarantine", "requeue", "resume", "rollback", "verify"):
            assert name in names, names
        assert all(f["rollback"] == "done" for f in document["faults"])
        # Every step passed before its deadline: more than half of each step's weight, whatever the times.
        assert 50.0 < document["score"] <= 100.0, document["score"]
        # -- the reports: JSON matches its schema, JUnit parses, the HTML embeds the timeline -------
        base = drills.report_dir / ("drill-%s" % document["id"])
        jsonschema.validate(json.loads(base.with_suffix(".json").read_text()), DRILL_SCHEMA)
        suite = ET.parse(str(base) + ".junit.xml").getroot()
        cases = [c.get("name") for c in suite.iter("testcase")]
        assert {"detected", "alerted", "scheduler", "recovered"} <= set(cases)
        assert not list(suite.iter("failure")), "a green drill has no JUnit failure"
        html = base.with_suffix(".html").read_text()
        assert "Resiliency score" in html
        assert 'id="timeline"' in html and "<svg" in html and "http://" not in html.replace("http://www.w3.org", "")
        assert ET.fromstring(base.with_suffix(".svg").read_text()).tag.endswith("svg")
        assert screenshot(base.with_suffix(".html"), tmp_path / "report.png") > 20000
        # -- the remediation that answered the drill ----------------------------------------------
        # The job runs again before the remediation ends: the spare's admission (its validation) and
        # the record come after the scheduler step.
        records = wait_for(lambda: [r for r in drills.audit(node) if r["started_at"] >= started - 1], 120, 0.5,
                           what="the audit record of the remediation of %s" % node)
        record = records[-1]
        assert record["result"] == "succeeded", record
        # Quarantine first by the first responder (the lab's default), which handed the remediation to
        # the playbook the alert started: one remediation, not resumed.
        assert record["trigger"]["source"] == "first_responder" and record["resumed_at"] == [], record
        assert record["fault"]["reason"] == "Xid79" and record["plan"]["name"] == "RESTART_BM"
        assert [s["phase"] for s in record["timeline"]] == REPLACE_PHASES
        assert seen["down"] and seen["cordoned"], seen
        fates = {j["job_id"]: j for j in record["jobs"]}
        assert job in fates and fates[job]["signalled"], record["jobs"]
        state = drills.job(job)
        assert state["JobState"] == "RUNNING" and state["BatchHost"] != node and int(state["Restarts"]) >= 1
        out = Drills.output(tmp_path / "job")
        # train_sim: "interrupted step=N signal=SIGTERM" (checkpoint N written), then "resume step=N".
        sigterm = int(re.search(r"interrupted time=\S+ step=(\d+) signal=SIGTERM", out).group(1))
        resumed = int(re.search(r"resume time=\S+ step=(\d+)", out).group(1))
        assert resumed == sigterm, "steps lost beyond the SIGTERM checkpoint: %d" % (sigterm - resumed)
        replacement = next(s for s in record["timeline"] if s["phase"] == "replace")["outcome"]["replacement"]
        assert replacement and drills.kube_node(node) is None
        # What the incident cost by the audit record: the node's 8 GPUs until the spare took its place.
        assert record["cost"]["node_gpus"] == 8 and record["cost"]["back_in_service_at"] is not None, record["cost"]
        spare = drills.kube_node(replacement)
        assert next(c for c in spare["status"]["conditions"] if c["type"] == "Ready")["status"] == "True"
        assert drills.slurm_node(replacement)["State"].split("+")[0] in ("IDLE", "MIXED", "ALLOCATED")
        print("\nE2E drill %s: %.1fs; detect %.1fs alert %.1fs quarantine %.1fs recover %.1fs; steps lost %s; "
              "remediation phases %s" % (
                  document["id"], document["finished_at"] - document["started_at"], metrics["time_to_detect_s"],
                  metrics["time_to_alert_s"], metrics["time_to_quarantine_s"], metrics["time_to_recover_s"],
                  metrics["steps_lost"], {s["phase"]: s["duration_s"] for s in record["timeline"]}))
    finally:
        stop.set()
        drills.cancel(job)
        disable_self_healing(lab, self_healing)
        if drills.kube_node(node) is None:
            drills.restore(node)
        drills.heal(node)
        drills.opt_in([node], allowed=False)
        drills.reset_state()
