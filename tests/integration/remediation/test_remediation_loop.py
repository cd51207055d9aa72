"""The remediation loop against the lab's real parts: kube-apiserver with kwok nodes, slurmctld and
slurmd, the health agents, Prometheus, Alertmanager, ansible-rulebook and ansible-playbook.

The test lab runs with self-healing off, so that other tests' injected faults are not remediated.
These tests run playbooks/remediate-node.yml directly, as the rulebook would. The end-to-end path
(alert -> rulebook -> playbook -> job resumed on a replacement) runs once in the suite, as the
XID 79 chaos drill: tests/integration/chaos/test_drill_end_to_end.py.
"""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
from pathlib import Path

import pytest
from agent_probe import AgentProbe, firing_alerts, prometheus_query, wait_for
from remediation_probe import NAMESPACE, Fleet, wait_until

from ansible_collections.gpufleet.resilience.plugins.module_utils.lab import fake_gpu_state

pytestmark = [pytest.mark.integration, pytest.mark.lab]

REPLACE_PHASES = ["fence", "quarantine", "notify", "jobs", "down", "opt_out", "drain", "evidence", "replace",
                  "admit", "record"]


def inject(lab, node, *xids, gpu=2):
    probe = AgentProbe(lab, node)
    for xid in xids:
        probe.fakegpu("xid", "--gpu", str(gpu), "--xid", str(xid))
    return probe.wait_condition(lambda c: c["status"] == "False", 30, what="GpuHealthy False on %s" % node)


def slurm_updates(lab, node):
    """slurmctld's own log of state and reason changes of ``node``: what a rerun must not repeat."""
    text = "".join(path.read_text(errors="replace") for path in (lab.lab_dir / "log").glob("slurmctld*"))
    return re.findall(r"update_node: node %s (state set to \S+|reason set to: .*)" % re.escape(node), text)


def test_bad_input_names_the_cause_and_changes_nothing(fleet, tmp_path):
    node = fleet.active_nodes()[0]
    before = fleet.snapshot()
    unknown = fleet.remediate("gpu-a-999")
    assert unknown.rc != 0 and "gpu-a-999" in unknown.output
    bad_name = fleet.remediate("gpu a;rm")
    assert bad_name.rc != 0 and "remediation_node must be one node name" in bad_name.output
    bad_breaker = fleet.remediate(node, remediation_breaker={"max_percent": 0})
    assert bad_breaker.rc != 0 and "remediation_breaker.max_percent" in bad_breaker.output
    bad_plan = fleet.remediate(node, remediation_plans={"RESTART_BM": ["notify", "explode", "record"]})
    assert bad_plan.rc != 0 and "remediation_plans.RESTART_BM[1]" in bad_plan.output
    bad_retry = fleet.remediate(node, remediation_retry={"tries": 0, "delay_s": 5})
    assert bad_retry.rc != 0 and "remediation_retry must be" in bad_retry.output, bad_retry.output[-2000:]
    # slurmctld unreachable: a slurm.conf pointing at a port nobody listens on.
    conf = tmp_path / "slurm.conf"
    conf.write_text(re.sub(r"(?m)^SlurmctldPort=\d+", "SlurmctldPort=1", fleet.lab.slurm_conf.read_text()))
    # (One try: a run tries again after a failure it cannot tell from an outage; the test below.)
    once = {"tries": 1}
    no_slurm = fleet.remediate(node, remediation_slurm_conf=str(conf), remediation_fault={"action": "RESTART_BM"},
                               remediation_retry=once)
    assert no_slurm.rc != 0 and "slurm" in no_slurm.output.lower()
    # The API server unreachable: a kubeconfig pointing at a closed port.
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(re.sub(r"https://127\.0\.0\.1:\d+", "https://127.0.0.1:1", fleet.lab.kubeconfig.read_text()))
    no_api = fleet.remediate(node, remediation_kubeconfig=str(kubeconfig), remediation_fault={"action": "RESTART_BM"},
                             remediation_retry=once)
    assert no_api.rc != 0 and ("refused" in no_api.output.lower() or "unreachable" in no_api.output.lower())
    assert fleet.snapshot() == before


def test_dry_run_and_check_mode_change_nothing(fleet):
    node = fleet.active_nodes()[1]
    inject(fleet.lab, node, 79)
    try:
        before, audit_before = fleet.snapshot(), fleet.audit(node)
        dry = fleet.remediate(node, remediation_dry_run=True)
        assert dry.rc == 0, dry.output[-3000:]
        assert "plan RESTART_BM" in dry.output
        check = fleet.lab.playbook("remediate-node.yml", "--check", extra={"remediation_node": node})
        assert check.rc == 0, check.output[-3000:]
        assert fleet.snapshot() == before
        assert fleet.audit(node) == audit_before  # no record written (a kept lab may hold older ones)
    finally:
        fleet.heal(node)


def test_xid13_only_notifies(fleet, tmp_path):
    node = fleet.active_nodes()[0]
    inject(fleet.lab, node, 13)
    try:
        slurm_before = fleet.slurm_states()[node]
        run = fleet.remediate(node)
        assert run.rc == 0, run.output[-3000:]
        record = fleet.audit(node)[-1]
        assert record["plan"]["name"] == "RESTART_APP" and record["result"] == "succeeded"
        assert [step["phase"] for step in record["timeline"]] == ["notify", "record"]
        assert fleet.slurm_states()[node] == slurm_before
        assert not fleet.kube_node(node)["spec"].get("unschedulable")
        # The fleet view draws it from the audit log.
        drawn = fleet.lab.playbook("fleet-status.yml", extra={"fleet_status_node": node,
                                                              "fleet_status_svg_dir": str(tmp_path)})
        assert drawn.rc == 0, drawn.output[-3000:]
        svg = (tmp_path / ("%s.svg" % record["id"])).read_text()
        assert "Remediation %s of %s: plan RESTART_APP, succeeded" % (record["id"], node) in svg
        assert 'class="phase phase-notify outcome-done"' in svg and "drawn to %s" % tmp_path in drawn.output
        missing = fleet.lab.playbook("fleet-status.yml", extra={"fleet_status_node": node,
                                                                "fleet_status_remediation_id": "r-none"})
        assert missing.rc != 0 and "fleet_status_node: no remediation r-none of %s" % node in missing.output
    finally:
        fleet.heal(node)


def test_a_run_that_fails_while_slurmctld_is_away_tries_again_by_itself(fleet):
    """slurmctld stopped (SIGSTOP: its port accepts and nothing answers, as behind a dead host) when
    the run starts: the first try fails, the run waits and tries again, and once slurmctld is back
    the remediation goes to its end; nothing waits for Alertmanager to repeat the alert.

    slurmctld comes back when the run says it waits for its next try, not after a fixed time: on a
    busy machine the playbook's start alone can outlast a timer, and the first try then succeeds."""
    node = fleet.active_nodes()[0]
    inject(fleet.lab, node, 13)
    pid = fleet.lab.recorded_pids()["slurmctld"]
    os.kill(pid, signal.SIGSTOP)
    process = None
    watchdog = None
    try:
        process = fleet.start_remediation(node, remediation_retry={"tries": 4, "delay_s": 2, "max_delay_s": 4})
        # A run that hangs would block the read below for ever: killed after 5 minutes, its output
        # ends and the asserts below say what it printed.
        watchdog = threading.Timer(300, fleet.kill, args=(process,))
        watchdog.daemon = True
        watchdog.start()
        output = []
        for line in process.stdout:
            output.append(line)
            if "Wait before the next try" in line:
                os.kill(pid, signal.SIGCONT)
        rc = process.wait(timeout=60)
        text = "".join(output)
        assert rc == 0, text[-3000:]
        # The first try failed and was rescued; a later one went through.
        assert "Wait before the next try" in text and re.search(r"rescued=[1-3]\b", text), text[-3000:]
        record = fleet.audit(node)[-1]
        assert record["plan"]["name"] == "RESTART_APP" and record["result"] == "succeeded", record
    finally:
        if watchdog is not None:
            watchdog.cancel()
        os.kill(pid, signal.SIGCONT)
        if process is not None and process.poll() is None:
            fleet.kill(process)
        fleet.heal(node)


def test_xid48_with_63_drains_resets_and_returns_the_node(fleet):
    node = fleet.active_nodes()[1]
    inject(fleet.lab, node, 63, 48)
    try:
        run = fleet.remediate(node)
        assert run.rc == 0, run.output[-3000:]
        record = fleet.audit(node)[-1]
        assert record["plan"]["name"] == "DRAIN_AND_RESET" and record["result"] == "succeeded", record
        assert [s["phase"] for s in record["timeline"]] == [
            "fence",
            "quarantine",
            "notify",
            "jobs",
            "opt_out",
            "drain",
            "evidence",
            "reset_gpu",
            "verify",
            "validate",
            "resume",
            "record",
        ]
        # Each phase starts where the one before it ended: the notify done in the start run is
        # stamped when it happened, after the fence and quarantine of the same run.
        assert all(step["duration_s"] >= 0 for step in record["timeline"]), record["timeline"]
        # Back in service: healthy, schedulable, untainted, Slurm IDLE.
        kube = fleet.kube_node(node)
        assert not kube["spec"].get("unschedulable")
        assert not [t for t in kube["spec"].get("taints") or [] if t["key"] == "gpufleet.io/gpu-unhealthy"]
        assert AgentProbe(fleet.lab, node).condition()["status"] == "True"
        assert fleet.slurm_states()[node].startswith("idle|")
        # Validated under load before it came back: the lab's burn ran as a Slurm job on the node,
        # in a reservation of it, which is gone again.
        validate = {step["phase"]: step["outcome"] for step in record["timeline"]}["validate"]
        assert validate["passed"] is True and validate["verdict"] == "ok" and validate["job_id"], validate
        assert "GPU 7: OK" in (fleet.lab.lab_dir / "remediation" / "validation" / (validate["reservation"] + ".out")
                               ).read_text()
        assert validate["reservation"] not in fleet.lab.slurm("scontrol", "show", "reservation", check=False)
    finally:
        fleet.heal(node)


def test_a_reset_whose_validation_fails_is_held_with_the_evidence(fleet):
    """NVML sees the GPU healthy after the reset, but it computes at 40 % of its neighbours' rate (the
    lab's perf_permille, which a reset keeps). The node's pool validates with all_reduce_perf (the
    lab's, whose ring runs at its slowest GPU) and a bus bandwidth floor: the validation fails, the
    node stays fenced and is held, and the output joins the evidence bundle. return-node.yml, with
    the role's default burn, refuses it while the GPU is slow and returns it once it is not."""
    node = fleet.active_nodes()[1]
    probe = AgentProbe(fleet.lab, node)
    before = probe.gpu(3)["perf_permille"]
    probe.fakegpu("set", "--gpu", "3", "perf_permille=400")
    inject(fleet.lab, node, 48)
    pool = fleet.kube_node(node)["metadata"]["labels"]["gpufleet.io/pool"]
    try:
        run = fleet.remediate(node, remediation_validate_pools={
            pool: {"backend": "nccl_tests", "min_busbw_gbps": 150}, "other-pool": {"backend": "none"}})
        assert run.rc == 0, run.output[-3000:]
        record = fleet.audit(node)[-1]
        assert record["result"] == "stopped" and record["stopped"]["at_phase"] == "validate", record
        validate = {step["phase"]: step["outcome"] for step in record["timeline"]}["validate"]
        assert validate["passed"] is False and validate["backend"] == "nccl_tests", validate
        assert validate["verdict"] == "ok" and validate["busbw_gbps"] < 150 and validate["min_busbw_gbps"] == 150
        why = "bus bandwidth %.1f GB/s below the floor of 150.0 GB/s (all_reduce_perf)" % validate["busbw_gbps"]
        assert record["stopped"]["why"] == why, record["stopped"]
        # Never back in service: drained in Slurm with why, cordoned, tainted, held for a human.
        slurm = fleet.slurm_node(node)
        assert "DRAIN" in slurm["State"] and slurm["Reason"].startswith("gpufleet: validation failed: bus band"), slurm
        kube = fleet.kube_node(node)
        assert kube["spec"]["unschedulable"] and kube["metadata"]["labels"]["gpufleet.io/remediation-hold"] == "true"
        assert "resume" not in [s["phase"] for s in record["timeline"] if not s["outcome"].get("skipped")]
        # The evidence: the bundle collected before the reset, and the run's output beside it.
        assert record["evidence"] and "# Avg bus bandwidth" in Path(record["evidence"], "validation.txt").read_text()
        assert validate["reservation"] not in fleet.lab.slurm("scontrol", "show", "reservation", check=False)

        # A human returns it: refused while the GPU is still slow (nothing lifted; --check does nothing
        # either), and back in service once it is not.
        returned = fleet.lab.playbook("return-node.yml", extra={"remediation_node": node})
        assert returned.rc != 0, returned.output[-3000:]
        assert "failed its validation: GPU(s) 3 below 75%" in returned.output, returned.output[-3000:]
        assert "DRAIN" in fleet.slurm_node(node)["State"] and fleet.kube_node(node)["spec"]["unschedulable"]
        probe.fakegpu("set", "--gpu", "3", "perf_permille=%d" % before)
        checked = fleet.lab.playbook("return-node.yml", "--check", extra={"remediation_node": node})
        assert checked.rc == 0 and "DRAIN" in fleet.slurm_node(node)["State"], checked.output[-3000:]
        returned = fleet.lab.playbook("return-node.yml", extra={"remediation_node": node})
        assert returned.rc == 0 and "passed its validation (ok)" in returned.output, returned.output[-3000:]
        kube = fleet.kube_node(node)
        assert not kube["spec"].get("unschedulable")
        assert "gpufleet.io/remediation-hold" not in kube["metadata"]["labels"]
        assert not [t for t in kube["spec"].get("taints") or [] if t["key"] == "gpufleet.io/gpu-unhealthy"]
        # Resumed: slurmd registers again, the node shows NOT_RESPONDING (idle*) for a moment.
        wait_until(lambda: fleet.slurm_states()[node].startswith("idle|"), 30, "%s IDLE in Slurm" % node)
    finally:
        probe.fakegpu("set", "--gpu", "3", "perf_permille=%d" % before)
        fleet.heal(node)


def test_opt_out_label_stops_after_the_fence_and_notifies_without_a_drain(fleet):
    node = fleet.active_nodes()[2]
    api = fleet.lab.kube()
    api.patch_node(node, {"metadata": {"labels": {"gpufleet.io/remediation": "disabled"}}})
    inject(fleet.lab, node, 79)
    try:
        run = fleet.remediate(node)
        assert run.rc == 0, run.output[-3000:]
        record = fleet.audit(node)[-1]
        assert record["result"] == "stopped" and record["stopped"]["at_phase"] == "opt_out"
        assert "node/%s" % node in record["stopped"]["why"]
        assert fleet.slurm_node(node)["State"].startswith("DOWN")
        assert "gpufleet: Xid79" in fleet.slurm_node(node)["Reason"]
        # Quarantine first: fenced in Slurm, cordoned and tainted before the opt-out was read; not drained
        # or replaced.
        kube = fleet.kube_node(node)
        assert kube is not None and kube["spec"].get("unschedulable")
        assert [t for t in kube["spec"].get("taints") or [] if t["key"] == "gpufleet.io/gpu-unhealthy"]
        reasons = [
            e.reason for e in api.list_namespaced_event("default", field_selector="involvedObject.name=%s" % node).items
        ]
        assert "GpuRemediationOptedOut" in reasons
    finally:
        fleet.heal(node)


def test_a_fault_for_support_is_fenced_and_held_for_a_human(fleet):
    """CONTACT_SUPPORT: fenced and quarantined first, notify, jobs, DOWN, then the hold phase labels
    the node and records its own phase (remediation_record state=alerted with `progress`)."""
    node = fleet.active_nodes()[0]
    api = fleet.lab.kube()
    try:
        run = fleet.remediate(node, remediation_fault={"action": "CONTACT_SUPPORT", "xid": 95, "gpu_index": 1})
        assert run.rc == 0, run.output[-3000:]
        record = fleet.audit(node)[-1]
        assert record["plan"]["name"] == "CONTACT_SUPPORT", record
        timeline = {step["phase"]: step["outcome"] for step in record["timeline"]}
        assert list(timeline) == ["fence", "quarantine", "notify", "jobs", "down", "evidence", "hold", "record"]
        assert timeline["hold"]["label"] == "gpufleet.io/remediation-hold=true" and timeline["hold"]["why"]
        kube = fleet.kube_node(node)
        assert kube["metadata"]["labels"]["gpufleet.io/remediation-hold"] == "true"
        assert kube["spec"]["unschedulable"]  # quarantined: no new pod while it waits for a human
        assert fleet.slurm_node(node)["State"].startswith("DOWN")
    finally:
        api.patch_node(node, {"metadata": {"labels": {"gpufleet.io/remediation-hold": None}}})
        fleet.heal(node)


def test_a_pdb_that_blocks_the_drain_is_reported_and_the_node_stays_fenced(fleet):
    from kubernetes import client

    node = fleet.active_nodes()[3]
    api = fleet.lab.kube()
    policy = client.PolicyV1Api(api.api_client)
    namespace = "pdb-guard"
    api.create_namespace({"metadata": {"name": namespace}})
    try:
        api.create_namespaced_pod(
            namespace,
            {
                "metadata": {"name": "guarded", "labels": {"app": "guarded"}},
                "spec": {
                    "nodeName": node,
                    "containers": [{"name": "c", "image": "registry.invalid/none"}],
                    "tolerations": [{"operator": "Exists"}],
                },
            },
        )
        wait_for(
            lambda: api.read_namespaced_pod("guarded", namespace).status.phase == "Running", 60, what="pod Running"
        )
        policy.create_namespaced_pod_disruption_budget(
            namespace,
            {
                "metadata": {"name": "guard"},
                "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}},
            },
        )
        wait_for(
            lambda: policy.read_namespaced_pod_disruption_budget("guard", namespace).status.expected_pods == 1,
            30,
            what="the PDB to count its pod",
        )
        # A job that ignores SIGTERM stays for the whole grace: the waits come in slices, each line saying
        # what is left (a pinned job: it is requeued, and cancelled below).
        stubborn = fleet.lab.slurm("sbatch", "--parsable", "--requeue", "--nodelist=" + node, "--job-name=stubborn",
                                   "--output=/dev/null", "--wrap", "trap '' TERM; sleep 300 & wait; sleep 300").strip()
        wait_for(lambda: fleet.lab.slurm("squeue", "--noheader", "--jobs", stubborn, "--format=%T").strip()
                 == "RUNNING", 60, what="the stubborn job running")
        inject(fleet.lab, node, 79)
        run = fleet.remediate(node, remediation_drain_timeout=5, remediation_grace=4, remediation_progress_every=1.5)
        assert run.rc == 0, run.output[-3000:]
        said = " ".join(run.output.split())
        assert "%s: %s still on the node" % (node, stubborn) in said, run.output[-4000:]
        assert "%s: %s/guarded still to leave" % (node, namespace) in said, run.output[-4000:]
        record = fleet.audit(node)[-1]
        assert record["result"] == "stopped" and record["stopped"]["at_phase"] == "drain"
        jobs = next(s for s in record["timeline"] if s["phase"] == "jobs")["outcome"]
        assert [(job["job_id"], job["fate"]) for job in jobs["jobs"]] == [(stubborn, "requeued")]
        drain = next(s for s in record["timeline"] if s["phase"] == "drain")["outcome"]
        assert [b["pod"] for b in drain["blocked"]] == ["%s/guarded" % namespace]
        kube = fleet.kube_node(node)
        assert kube is not None and kube["spec"]["unschedulable"]  # fenced, quarantined, not replaced
        assert fleet.slurm_node(node)["State"].startswith("DOWN")
    finally:
        fleet.lab.slurm("scancel", "--name=stubborn", check=False)
        api.delete_namespace(namespace)
        fleet.heal(node)


def assert_cost_matches_the_timeline(lab, record, job, train_out):
    """GPU-hours lost: the node's 8 GPUs from the fault to the end of the spare's admission (validated in
    its place), and the job's one GPU from the fault until Slurm started it again, which is when
    train_sim says it resumed, or just before."""
    cost, ends = record["cost"], {step["phase"]: step["end"] for step in record["timeline"]}
    began = cost["fault_at"]
    assert began == record["fault"]["since"] and began <= record["started_at"], (cost, record["fault"])
    assert (cost["node_gpus"], cost["back_in_service_at"], cost["open"], cost["unknown"]) == (
        8, ends["admit"], [], []), cost
    assert cost["node_gpu_hours"] == pytest.approx(8 * (ends["admit"] - began) / 3600, abs=1e-3)
    (moved,) = cost["jobs"]
    started = lab.slurm("scontrol", "show", "job", job, "-o").split(" StartTime=", 1)[1].split()[0]
    assert moved["job_id"] == job and moved["gpus"] == 1
    assert moved["running_again_at"] == time.mktime(time.strptime(started, "%Y-%m-%dT%H:%M:%S")), (moved, started)
    resumed = [float(line.split("time=")[1].split()[0])
               for line in train_out.splitlines() if line.startswith("resume ")]
    assert ends["jobs"] - 1 <= moved["running_again_at"] <= resumed[-1] + 1, (moved, ends["jobs"], resumed)
    assert moved["waiting_gpu_hours"] == pytest.approx((moved["running_again_at"] - began) / 3600, abs=1e-3)
    assert cost["gpu_hours_lost"] == pytest.approx(cost["node_gpu_hours"] + moved["waiting_gpu_hours"], abs=1e-3)
    # Prometheus has it from the audit log's exporter: the last line of each Xid79 RESTART_BM remediation.
    last = {}
    for line in (lab.lab_dir / "remediation" / "audit.jsonl").read_text().splitlines():
        seen = json.loads(line)
        if (seen["fault"].get("reason"), seen["plan"]["name"]) == ("Xid79", "RESTART_BM"):
            last[seen["id"]] = (seen.get("cost") or {}).get("gpu_hours_lost") or 0
    expected = sum(last.values())

    def scraped():
        result = prometheus_query('sum(gpufleet_incident_gpu_hours_lost_total{cause="Xid79", plan="RESTART_BM"})')
        values = [float(item["value"][1]) for item in result["data"]["result"]]
        return values and abs(values[0] - expected) < 1e-6

    wait_for(scraped, 30, 0.5, what="Prometheus scraping %s GPU-hours lost to Xid79" % expected)


def test_killed_at_every_phase_the_rerun_does_each_action_once(fleet, tmp_path):
    lab = fleet.lab
    job, node = fleet.submit_train_sim(tmp_path / "job")
    inject(lab, node, 79)
    # The same fault as the driver logs it, for the evidence's kernel log.
    AgentProbe(lab, node).kernel_line("NVRM: Xid (PCI:0000:18:00): 79, pid=4242, name=train_sim, "
                                      "GPU has fallen off the bus.")
    updates_before = len(slurm_updates(lab, node))
    spares_before = set(fleet.active_nodes())
    kills = []
    try:
        for phase_index in range(len(REPLACE_PHASES)):
            resumes = len((fleet.progress(node) or {}).get("resumed") or [])
            process = fleet.start_remediation(node)

            # Kill it once the phases before this one are recorded: somewhere inside this phase. A rerun
            # must have recorded its own resume first: the phases the run before recorded would otherwise
            # let the kill land before this run started (twice, on a loaded machine).
            def reached(index=phase_index, process=process, resumes=resumes):
                progress = fleet.progress(node)
                done = len((progress or {}).get("phases") or {})
                resumed = index == 0 or len((progress or {}).get("resumed") or []) > resumes
                started = progress and not progress.get("finished_at") and done >= index and resumed
                return started or process.poll() is not None

            try:
                wait_for(reached, 120, 0.05, what="phase %d" % phase_index)
            finally:
                if process.poll() is None:
                    fleet.kill(process)
                    kills.append(REPLACE_PHASES[phase_index])
        # The job, requeued by the jobs phase, runs again on another node before the record is written.
        wait_for(lambda: "resume " in Fleet.output(tmp_path / "job"), 60, what="train_sim resumed")
        final = fleet.remediate(node)
        assert final.rc == 0, final.output[-3000:]
        record = [r for r in fleet.audit(node) if r["result"] == "succeeded"][-1]
        assert [s["phase"] for s in record["timeline"]] == REPLACE_PHASES
        assert_cost_matches_the_timeline(lab, record, job, Fleet.output(tmp_path / "job"))
        assert len(record["resumed_at"]) >= len(kills) - 1, (kills, record["resumed_at"])
        # Each action once: one drain, one DOWN (and the retirement's FUTURE) in slurmctld's log,
        # one SIGTERM seen by the job, one spare activated.
        updates = slurm_updates(lab, node)[updates_before:]
        states = [u for u in updates if u.startswith("state set to")]
        assert sum(s.startswith("state set to DRAIN") for s in states) == 1, updates
        assert sum(s == "state set to DOWN" for s in states) == 1, updates
        assert Fleet.output(tmp_path / "job").count("signal=SIGTERM") == 1
        added = set(fleet.active_nodes()) - spares_before
        assert len(added) == 1 and fleet.kube_node(node) is None
        # The spare came up drained with the remediation's reason, passed its validation in a
        # reservation of its own, and takes work.
        (spare,) = added
        steps = {s["phase"]: s["outcome"] for s in record["timeline"]}
        assert "drain Slurm node %s before it registers: gpufleet:" % spare in " ".join(steps["replace"]["actions"])
        assert steps["admit"]["passed"] is True and steps["admit"]["node"] == spare, steps["admit"]
        assert steps["admit"]["actions"][-1] == "admitted %s: it takes work" % spare
        assert fleet.slurm_states()[spare].split("|")[0] in ("idle", "mixed", "allocated"), fleet.slurm_states()
        # The evidence, collected once before the replacement, holds the fault as each part saw it.
        evidence_dir = lab.lab_dir / "remediation" / "evidence"
        bundles = [evidence_dir / record["id"]]
        assert record["evidence"] == str(bundles[0]) and not (evidence_dir / (record["id"] + ".partial")).exists()
        manifest = json.loads((bundles[0] / "manifest.json").read_text())
        assert [part["name"] for part in manifest["parts"]] == [
            "slurm.json", "kubernetes.json", "agent-metrics.txt", "agent-journal.jsonl", "kernel.log"], manifest
        assert [(m["part"], "is not on the PATH" in m["why"]) for m in manifest["missing"]] == [
            ("nvidia-bug-report.log.gz", True)]
        assert "79, pid=4242" in (bundles[0] / "kernel.log").read_text(), "the XID line the agent read"
        assert re.search(r'gpufleet_gpu_xid_errors_total\{[^}]*xid="79"[^}]*\} [1-9]',
                         (bundles[0] / "agent-metrics.txt").read_text()), "the agent's count of XID 79"
        seen = json.loads((bundles[0] / "slurm.json").read_text())["node"]
        assert seen["name"] == node and "DRAIN" in seen["flags"]
        assert json.loads((bundles[0] / "kubernetes.json").read_text())["node"]["spec"]["unschedulable"] is True
        print("\ncrash safety: killed in %s; resumed %d times" % (kills, len(record["resumed_at"])))
    finally:
        fleet.cancel(job)
        if fleet.kube_node(node) is None:
            fleet.restore(node)
        fleet.heal(node)


def test_a_replacement_that_fails_its_validation_takes_no_work_and_is_held(fleet):
    """XID 79, and every spare of the pool has a GPU at 40 % of its rate (the lab's perf_permille, which
    bringing a spare online keeps): the spare comes up drained, fails its admission, stays drained in
    Slurm with why, and is held for a human; the remediation stops at admit."""
    node = fleet.active_nodes()[0]
    spares = sorted(set(os.listdir(fleet.lab.lab_dir / "gpus")) - set(fleet.active_nodes()))
    before = {spare: fake_gpu_state.read(str(fleet.lab.lab_dir / "gpus" / spare))["gpus"][3]["perf_permille"]
              for spare in spares}
    for spare in spares:
        fake_gpu_state.set_fields(str(fleet.lab.lab_dir / "gpus" / spare), 3, perf_permille=400)
    inject(fleet.lab, node, 79)
    try:
        run = fleet.remediate(node)
        assert run.rc == 0, run.output[-3000:]
        record = fleet.audit(node)[-1]
        assert record["result"] == "stopped" and record["stopped"]["at_phase"] == "admit", record
        admit = {step["phase"]: step["outcome"] for step in record["timeline"]}["admit"]
        spare = admit["node"]
        assert spare in spares and admit["passed"] is False and admit["slow"] == [3], admit
        slurm = fleet.slurm_node(spare)
        assert "DRAIN" in slurm["State"] and slurm["Reason"].startswith("gpufleet: validation failed: GPU(s) 3"), slurm
        assert fleet.kube_node(spare)["metadata"]["labels"]["gpufleet.io/remediation-hold"] == "true"
        assert admit["reservation"] not in fleet.lab.slurm("scontrol", "show", "reservation", check=False)
        # The pool is a node short until a human returns the spare; the incident's cost is still open.
        assert record["cost"]["back_in_service_at"] is None and "node" in record["cost"]["open"], record["cost"]
    finally:
        for spare, perf in before.items():
            fake_gpu_state.set_fields(str(fleet.lab.lab_dir / "gpus" / spare), 3, perf_permille=perf)
        if fleet.kube_node(node) is None:
            fleet.restore(node)
        fleet.heal(node)


def test_a_storm_trips_the_breaker_at_its_cap(fleet):
    """Fatal faults on half of the pool at once, with the default breaker (25 %: one node of the test
    lab's four): the cap acts in full, the others are refused and only fenced in Slurm. A reset with
    take_up=false names them and leaves them fenced; the reset that takes them up remediates each to
    its end, once, and nothing is held as "came back after remediation". The lab's pool has two
    spares, which earlier tests may leave in use: one replaced node at a time needs only one."""
    lab = fleet.lab
    nodes = fleet.active_nodes()
    gpu_nodes = len(lab.kube().list_node(label_selector="gpufleet.io/pool").items)
    breaker_policy = {"max_percent": 25, "max_nodes": 10, "window_s": 600}
    cap = max(1, min(10, gpu_nodes // 4))
    storm = nodes[: max(cap + 1, len(nodes) // 2)]
    assert len(storm) > cap, (gpu_nodes, nodes)
    for node in storm:
        inject(lab, node, 79)
    cordoned_max = [0]
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            taken = sum(
                1 for n in lab.kube().list_node(label_selector="gpufleet.io/pool").items if n.spec.unschedulable
            )
            cordoned_max[0] = max(cordoned_max[0], taken)
            time.sleep(0.1)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    before = set(fleet.active_nodes())
    try:
        processes = [fleet.start_remediation(node, remediation_breaker=breaker_policy) for node in storm]
        outputs = [p.communicate(timeout=600)[0] for p in processes]
        stop.set()
        assert all(p.returncode == 0 for p in processes), [o[-2000:] for o in outputs]
        results = {node: fleet.audit(node)[-1] for node in storm}
        acted = [n for n, r in results.items() if r["plan"]["name"] == "RESTART_BM"]
        refused = [n for n, r in results.items() if r["plan"]["name"] == "BREAKER_OPEN"]
        assert len(acted) == cap and len(refused) == len(storm) - cap, results
        assert all(results[n]["result"] == "succeeded" for n in acted), results
        assert all(results[n]["result"] == "refused" for n in refused)
        assert cordoned_max[0] <= cap
        states = fleet.slurm_states()
        for node in refused:
            # Refused: fenced in Slurm with our reason (no new work on a dead GPU), and nothing more.
            state, reason = states[node].split("|", 1)
            assert state.startswith("drain") and reason.startswith("gpufleet: "), (node, states[node])
            assert not fleet.kube_node(node)["spec"].get("unschedulable"), node
            assert [step["phase"] for step in results[node]["timeline"]] == ["fence", "notify", "record"], results[node]
        breaker = fleet.module("remediation_breaker", {"kubeconfig": str(lab.kubeconfig), "namespace": NAMESPACE})[
            "breaker"
        ]
        assert breaker["tripped"]
        assert sorted(entry["node"] for entry in breaker["refused"]) == sorted(refused)
        # A refusal is not a remediation: the history says BREAKER_OPEN, which escalation does not count.
        history = lab.kube().read_namespaced_config_map("gpufleet-remediation-history", NAMESPACE).data
        for node in refused:
            assert json.loads(history[node])[-1]["action"] == "BREAKER_OPEN", history[node]
        wait_for(lambda: firing_alerts("GpuRemediationBreakerTripped"), 30, what="the breaker's alert in Alertmanager")
        # take_up=false: the breaker closes and its alert resolves; the refused nodes are named and
        # stay fenced, listed for their next alert.
        left = lab.playbook("remediation-reset.yml", extra={"take_up": False})
        assert left.rc == 0 and "Left waiting for their remediation (take_up=false)" in left.output, (
            left.output[-3000:])
        assert all(node in left.output for node in refused) and ": plan RESTART_BM (" not in left.output
        wait_for(lambda: not firing_alerts("GpuRemediationBreakerTripped"), 30, what="the breaker's alert resolved")
        # The node that acted was replaced from a spare; it comes back from repair and the spare
        # returns to the pool, so that the refused node can be replaced in turn.
        for node in acted:
            fleet.restore(node)
            fleet.heal(node)
        # The reset that takes them up: each is remediated to its end, once (the fault is still
        # there, so its plan is RESTART_BM), none held as "came back after remediation".
        reset = lab.playbook("remediation-reset.yml", extra={"clear_slots": True, "remediation_breaker": breaker_policy,
                                                             "remediation_grace": 30, "remediation_drain_timeout": 20})
        assert reset.rc == 0, reset.output[-3000:]
        assert "Taking each up now, once." in reset.output, reset.output[-3000:]
        # "starting r-…: plan RESTART_BM (fence, …)": one remediation per refused node.
        assert reset.output.count(": plan RESTART_BM (") == len(refused) and "HOLD" not in reset.output, (
            reset.output[-3000:])
        for node in refused:
            record = fleet.audit(node)[-1]
            assert record["plan"]["name"] == "RESTART_BM" and record["result"] == "succeeded", record
            # RESTART_BM in the lab: the node is retired and a spare serves in its place.
            assert "replace" in [step["phase"] for step in record["timeline"]], record
            assert fleet.kube_node(node) is None, node
        assert len(fleet.active_nodes()) == len(before)
        breaker = fleet.module("remediation_breaker", {"kubeconfig": str(lab.kubeconfig), "namespace": NAMESPACE})[
            "breaker"
        ]
        assert not breaker["tripped"] and breaker["refused"] == [], breaker
        fleet.reset_state()
    finally:
        stop.set()
        for node in storm:
            if fleet.kube_node(node) is None:
                fleet.restore(node)
            fleet.heal(node)
        assert set(fleet.active_nodes()) == before


def test_concurrent_remediations_never_share_the_last_slot(fleet):
    """Eight remediations race for one breaker slot through the real API server: its compare-and-swap
    (409 Conflict, read again) lets exactly one through, and the others trip the breaker."""
    from concurrent.futures import ThreadPoolExecutor

    from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.client import core_v1
    from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation.breaker import BreakerPolicy
    from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation.store import Policy, RemediationStore

    policy = Policy(breaker=BreakerPolicy(max_percent=100, max_nodes=1, window_s=600))
    start = threading.Barrier(8)

    def take(index):
        store = RemediationStore(core_v1(str(fleet.lab.kubeconfig)), policy)
        start.wait()
        return store.take_slot("race-node-%d" % index, "race-%d" % index, time.time()).granted

    with ThreadPoolExecutor(8) as pool:
        granted = list(pool.map(take, range(8)))
    assert granted.count(True) == 1, granted
    state = RemediationStore(core_v1(str(fleet.lab.kubeconfig)), policy).breaker_state()
    assert len(state.slots) == 1 and state.tripped
