"""Chaos drills against the lab's real parts: the safety rails, every experiment's inject ->
detection -> rollback -> identical state (GPU faults and burn in parallel on the pool's nodes;
checkpoint chaos on the lab's tmpfs volume with a real train_sim job), the kill switch, killed
controllers (Ctrl-C and kill -9), the expiry watchdog, and a drill that finds the gaps of a lab
whose remediation is off.

The test lab runs with self-healing off; the end-to-end XID 79 drill with the whole loop on is in
test_drill_end_to_end.py.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import re
import shutil
import signal
import time
from pathlib import Path

import pytest
from agent_probe import wait_for
from drill_probe import Drills, wait_equal
from lab_harness import TEST_LAB_VARS, PlaybookResult

from ansible_collections.gpufleet.resilience.plugins.module_utils.lab import fake_gpu_state

pytestmark = [pytest.mark.integration, pytest.mark.lab]

POOL_NODES = ["gpu-a-001", "gpu-a-002", "gpu-a-003", "gpu-a-004"]
# The node faults the agent sees: the GPU faults, the burn and the InfiniBand ports (12: three
# batches of four).
GPU_EXPERIMENTS = ["gpu_xid", "gpu_ecc_dbe", "gpu_ecc_sbe_storm", "gpu_retired_pages", "gpu_row_remap_failure",
                   "gpu_thermal", "gpu_power", "gpu_nvlink", "gpu_fallen_off_bus", "gpu_burn",
                   "ib_port_down", "ib_link_flap"]
# Short deadlines: these drills check detection and rollback; with self-healing off nothing fences.
WHOLE_POOL = {"max_nodes": 4, "max_percent": 100}
# An alert reaches Alertmanager in 1-3 s in the lab; an experiment with no alert rule waits the whole
# `alerted` deadline before its report says so, and a batch of drills waits for its slowest.
QUICK = {"chaos_drill_deadlines": {"detected": 30, "alerted": 10, "scheduler": 3, "recovered": 3},
         "chaos_drill_verify_timeout": 60}


@pytest.fixture(scope="module")
def drills(lab):
    drills = Drills(lab)
    nodes = [n for n in POOL_NODES if drills.kube_node(n) is not None]
    drills.opt_in(nodes)
    yield drills
    drills.stop(clear=True)
    drills.opt_in(nodes, allowed=False)
    # Rollback completeness over every drill of the session (the end-to-end drill ran before these).
    ledger = drills.ledger()
    done = [f for f in ledger.get("history", []) if f.get("rolled_back_by") != "refused"]
    figures = {"injected": len(done) + len(ledger.get("faults", {})), "rolled_back": len(done),
               "by": {how: sum(1 for f in done if f.get("rolled_back_by") == how)
                      for how in ("drill", "expiry", "kill_switch")},
               "still_active": len(ledger.get("faults", {}))}
    print("\nROLLBACK COMPLETENESS: %s" % figures)
    # Kept beside the drill reports, so a CI run's figure can be read afterwards.
    (drills.report_dir / "rollback-completeness.json").write_text(json.dumps(figures))
    assert ledger.get("faults", {}) == {}, "faults left in the ledger: %s" % ledger["faults"]


def test_refusals_and_dry_run_change_nothing(drills):
    node = "gpu-a-001"
    before = drills.node_snapshot(node)
    ledger_before = drills.ledger().get("faults", {})
    # No opt-in.
    drills.opt_in([node], allowed=False)
    refused = drills.drill("gpu_xid", node, **QUICK)
    assert refused.rc != 0 and "has not opted in" in refused.output and "target" in refused.output
    drills.opt_in([node])
    # Over the blast radius: the whole pool is 100 %, the cap is 25 % (one node of four).
    wide = drills.drill("gpu_xid", "gpufleet.io/pool=gpu-a", **QUICK)
    assert wide.rc != 0 and "blast_radius" in wide.output
    # No duration, or one over the cap.
    too_long = drills.drill("gpu_xid", node, duration=7200, **QUICK)
    assert too_long.rc != 0 and "duration" in too_long.output and "max_duration" in too_long.output
    # Unknown experiment, bad knob: named, nothing done.
    unknown = drills.drill("gpu_meltdown", node)
    assert unknown.rc != 0 and "experiment" in unknown.output and "gpu_xid" in unknown.output
    bad_knob = drills.drill("gpu_xid", node, xid="seventy-nine")
    assert bad_knob.rc != 0 and "params.xid" in bad_knob.output
    # The dry run prints the plan and changes nothing.
    dry = drills.drill("gpu_xid", node, xid=79, dry_run=True)
    assert dry.rc == 0, dry.output[-3000:]
    assert "queue an NVML XID 79 event on GPU 0" in dry.output and "NVRM: Xid" in dry.output
    assert drills.node_snapshot(node) == before
    assert drills.ledger().get("faults", {}) == ledger_before
    assert not drills.ledger().get("drills")


def test_every_experiment_is_detected_and_rolled_back_to_the_same_state(drills):
    nodes = POOL_NODES
    todo = list(GPU_EXPERIMENTS)
    results = {}

    def run(experiment, node):
        before = drills.node_snapshot(node)
        started = time.monotonic()
        # Four drills at once on the four nodes of the pool: the blast radius must allow it explicitly,
        # and the brakes are off: each drill would see the other three targets unhealthy and abort.
        result = drills.drill(experiment, node, duration=300, chaos_drill_blast_radius=WHOLE_POOL,
                              chaos_drill_abort_conditions=[], **QUICK)
        return experiment, node, before, result, time.monotonic() - started

    while todo:
        batch = [(todo.pop(0), node) for node in nodes if todo]
        with concurrent.futures.ThreadPoolExecutor(len(batch)) as pool:
            for experiment, node, before, result, took in pool.map(lambda args: run(*args), batch):
                assert result.rc == 0, "%s on %s:\n%s" % (experiment, node, result.output[-4000:])
                document = drills.report(result)
                after = wait_equal(lambda n=node: drills.node_snapshot(n), before, 60)
                results[experiment] = (document, after == before, took)
                assert after == before, "%s left %s changed: %r != %r" % (experiment, node, after, before)
    lines = []
    for experiment, (document, _same, took) in sorted(results.items()):
        steps = {s["step"]: s["verdict"] for s in document["steps"]}
        # Every GPU fault and the burn is observable in the lab: the agent's metric shows it.
        assert steps["detected"] == "pass", (experiment, document["steps"])
        assert all(f["rollback"] == "done" for f in document["faults"]) and document["faults"]
        assert document["phases"][-1]["phase"] == "verify" and document["phases"][-1]["ok"], document["phases"]
        if steps["alerted"] == "fail":
            assert document["gaps"] and document["gaps"][0]["add"], document
        lines.append("%s: %.1fs detect %ss alert %s (%s)" % (
            experiment, took, document["metrics"]["time_to_detect_s"], document["metrics"]["time_to_alert_s"],
            steps["alerted"]))
    print("\nDRILLS: " + "; ".join(lines))
    ledger = drills.ledger()
    assert ledger.get("faults") == {} and ledger.get("drills") == {}


def test_killed_controllers_kill_switch_and_watchdog_leave_nothing_behind(drills):
    """Two drills stopped mid-observation: one by Ctrl-C (SIGINT to its process group), whose fault's
    duration is long - chaos-stop.yml (the kill switch) rolls it back from the ledger and refuses new
    drills until it is cleared; the other by SIGKILL of its whole process tree, with a short duration
    and nobody coming back - the async watchdog rolls it back at expiry."""
    long_node, short_node = "gpu-a-003", "gpu-a-004"
    before = {node: drills.node_snapshot(node) for node in (long_node, short_node)}
    patient = {"detected": 300, "alerted": 300, "scheduler": 300, "recovered": 300}
    two = {"max_nodes": 2, "max_percent": 50}
    running = {long_node: drills.start_drill("gpu_ecc_dbe", long_node, duration=600, chaos_drill_deadlines=patient,
                                             chaos_drill_blast_radius=two),
               short_node: drills.start_drill("gpu_thermal", short_node, duration=25, chaos_drill_deadlines=patient,
                                              chaos_drill_blast_radius=two)}
    try:
        def active(node):
            return any(f.get("state") == "active" and f["node"] == node
                       for f in drills.ledger().get("faults", {}).values())

        for node in running:
            wait_for(lambda n=node: active(n), 180, 0.5, what="the fault on %s active in the ledger" % node)
        os.killpg(running[long_node].pid, signal.SIGINT)  # Ctrl-C
        running[long_node].wait(timeout=120)
        for process in running.values():
            drills.kill(process)
        for node in running:
            assert drills.node_snapshot(node)["fake_gpus"] != before[node]["fake_gpus"], "the fault is still in place"
        # Nobody comes back for the short one: its watchdog outlived the kill and rolls it back at expiry.
        assert wait_equal(lambda: drills.node_snapshot(short_node), before[short_node], 90) == before[short_node]
        # The long one: the kill switch.
        stopped = drills.stop()
        assert stopped.rc == 0, stopped.output[-3000:]
        assert wait_equal(lambda: drills.node_snapshot(long_node), before[long_node], 60) == before[long_node]
        ledger = drills.ledger()
        assert ledger["kill_switch"]["on"] is True and ledger["faults"] == {}
        done = {f["node"]: f for f in ledger["history"] if f["node"] in running}
        by = {node: f["rolled_back_by"] for node, f in done.items()}
        # The warden (10 s after the expiry) would mean the watchdog died or was that late: say what it saw.
        assert by == {long_node: "kill_switch", short_node: "expiry"}, (done, _warden_log(drills)[-2000:])
        # While the kill switch is on, a new drill is refused before it touches anything.
        refused = drills.drill("gpu_thermal", "gpu-a-001", **QUICK)
        assert refused.rc != 0 and "kill switch" in refused.output
    finally:
        for process in running.values():
            if process.poll() is None:
                drills.kill(process)
        cleared = drills.stop(clear=True)
    assert cleared.rc == 0 and drills.ledger()["kill_switch"]["on"] is False
    # The kill switch ended the killed drills; the watchdog ended its own after the expiry.
    assert drills.ledger().get("drills") == {}


def test_a_drill_killed_with_its_watchdog_is_rolled_back_by_the_warden(drills):
    """AWX cancels a job by removing its container: the drill and its async watchdog die together.
    Here the drill runs in a PID namespace of its own (`unshare --pid --kill-child`); SIGKILL of
    `unshare` makes the kernel kill every process in the namespace, the daemonized watchdog too.
    The lab's chaos warden, a lab process outside the drill's tree, rolls the fault back by its expiry."""
    node = "gpu-a-002"
    before = drills.node_snapshot(node)
    warden = drills.lab.recorded_pids().get("chaos-warden")
    assert warden and os.path.exists("/proc/%d" % warden), "the lab runs no chaos warden"
    patient = {"detected": 300, "alerted": 300, "scheduler": 300, "recovered": 300}
    duration = 20
    process = drills.start_drill("gpu_thermal", node, duration=duration, chaos_drill_deadlines=patient,
                                 wrap=["unshare", "--pid", "--fork", "--kill-child"])
    try:
        def fault():
            found = [f for f in drills.ledger().get("faults", {}).values()
                     if f.get("state") == "active" and f["node"] == node]
            return found[0] if found else None

        active = wait_for(fault, 180, 0.5, what="the fault on %s active in the ledger" % node)
        namespace = _pid_namespace(_children(process.pid)[0])
        # The watchdog runs, inside the drill's namespace (async_wrapper, then chaos_ledger state=expired).
        wait_for(lambda: [pid for pid in _in_namespace(namespace) if "chaos_ledger" in _cmdline(pid)], 30, 0.5,
                 what="the drill's watchdog in its namespace")
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
        wait_for(lambda: not _in_namespace(namespace), 30, 0.5, what="every process of the killed drill gone")
        assert drills.node_snapshot(node)["fake_gpus"] != before["fake_gpus"], "the fault is still in place"
        left = active["expires_at"] - time.time()
        # Back by its expiry: the warden's grace (10 s) and interval (5 s) after it, at most.
        assert wait_equal(lambda: drills.node_snapshot(node), before, max(left, 0) + 45) == before
        ledger = drills.ledger()
        done = [f for f in ledger["history"] if f["id"] == active["id"]]
        assert done and done[0]["rolled_back_by"] == "warden", done
        assert done[0]["rolled_back_at"] >= active["expires_at"]
        wait_for(lambda: active["drill"] not in drills.ledger().get("drills", {}), 30, 0.5,
                 what="the warden to end the killed drill")
    finally:
        if process.poll() is None:
            process.kill()


def _warden_log(drills):
    try:
        return Path(drills.lab.lab_dir, "log", "chaos-warden.log").read_text(errors="replace")
    except OSError as exc:
        return "(no warden log: %s)" % exc


def _cmdline(pid):
    try:
        with open("/proc/%s/cmdline" % pid, "rb") as handle:
            return handle.read().decode(errors="replace")
    except OSError:
        return ""


def _pid_namespace(pid):
    try:
        return os.readlink("/proc/%s/ns/pid" % pid)
    except OSError:
        return None


def _in_namespace(namespace):
    return [pid for pid in os.listdir("/proc") if pid.isdigit() and _pid_namespace(pid) == namespace]


def _children(parent):
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open("/proc/%s/stat" % pid) as handle:
                    if int(handle.read().rsplit(")", 1)[1].split()[1]) == parent:
                        found.append(int(pid))
            except (OSError, IndexError, ValueError):
                continue
    return found


def test_a_drill_against_a_lab_without_remediation_reports_the_gap(drills, tmp_path):
    assert TEST_LAB_VARS["self_healing_enabled"] is False
    job, node = drills.submit_train_sim(tmp_path / "job")
    try:
        output = str(tmp_path / "job" / "train.out")
        result = drills.drill("gpu_xid", node, xid=79, protected_job=job, protected_output=output,
                              chaos_drill_deadlines={"detected": 30, "alerted": 30, "scheduler": 10,
                                                     "recovered": 10})
        assert result.rc == 0, result.output[-4000:]
        document = drills.report(result)
        steps = {s["step"]: s["verdict"] for s in document["steps"]}
        assert steps == {"detected": "pass", "alerted": "pass", "scheduler": "fail", "recovered": "fail"}, document
        assert document["result"] == "failed"
        gaps = {g["step"] for g in document["gaps"]}
        assert gaps == {"scheduler", "recovered"} and "self_healing_enabled" in document["gaps"][0]["add"]
        # The JUnit file says the same to a CI system.
        junit = (drills.report_dir / ("drill-%s.junit.xml" % document["id"])).read_text()
        assert junit.count("<failure") >= 2
        assert drills.job(job)["JobState"] == "RUNNING", "the job was left alone on its node"
    finally:
        drills.cancel(job)


def test_checkpoint_chaos_keeps_the_last_good_checkpoint(drills, tmp_path):
    """Kill mid-write: the job resumes from the previous valid checkpoint, never the torn one. Fill the
    volume, then cut it (read-only): the job reports each failed save, keeps training and keeps its
    last good checkpoint; after the rollback its saves work again and the volume is as before."""
    volume = drills.checkpoint_volume
    assert os.path.ismount(volume), "the lab's checkpoint volume is a tmpfs (role storage, as root)"
    checkpoints = volume / ("test-%d" % os.getpid())
    checkpoints.mkdir(mode=0o777)
    os.chmod(checkpoints, 0o777)
    output = tmp_path / "job" / "train.out"
    # Slow synchronous saves (the kill lands mid-write) of 200 kB each (the fill leaves less than that).
    slow_and_big = ("--checkpoint-write-seconds", "0.8", "--checkpoint-pad-bytes", "200000")
    job, node = drills.submit_train_sim(tmp_path / "job", every=25, checkpoint_dir=checkpoints, extra=slow_and_big)
    quick = {"chaos_drill_deadlines": {"detected": 40, "alerted": 3, "scheduler": 3, "recovered": 60}}
    common = dict(protected_job=job, protected_output=str(output), **quick)
    try:
        before = drills.node_snapshot(node)
        wait_for(lambda: "\ncheckpoint time=" in Drills.output(tmp_path / "job"), 60, what="a first checkpoint")
        # -- kill mid-write -------------------------------------------------------------------------
        killed = drills.drill("checkpoint_kill", node, **common)
        assert killed.rc == 0, killed.output[-4000:]
        document = drills.report(killed)
        steps = {s["step"]: s["verdict"] for s in document["steps"]}
        assert steps["recovered"] == "pass", document["steps"]
        text = Drills.output(tmp_path / "job")
        resume = scoring_resume(text, document["started_at"])
        first_run = text[:text.rfind("\nresume ")]
        torn = [int(s) for s in re.findall(r"checkpoint_begin time=\S+ step=(\d+)", first_run)][-1]
        assert resume["step"] < torn and resume["step"] % 25 == 0, (resume, torn)
        assert re.search(r"skip_partial time=\S+ file=\.ckpt-%09d\.json\." % torn, text), "the torn write, skipped"
        assert document["metrics"]["steps_lost"] >= torn - resume["step"] - 1
        # -- fill the volume --------------------------------------------------------------------------
        wait_for(lambda: drills.job(job).get("JobState") == "RUNNING", 60, what="the job running again")
        filled = drills.drill("checkpoint_fill", node, **common)
        assert filled.rc == 0, filled.output[-4000:]
        document = drills.report(filled)
        steps = {s["step"]: s["verdict"] for s in document["steps"]}
        assert steps["detected"] == "pass" and steps["recovered"] == "pass", document["steps"]
        assert "reason=ENOSPC" in Drills.output(tmp_path / "job")
        assert {g["step"] for g in document["gaps"]} >= {"alerted"}, "no alert covers a failed save: a gap"
        # -- cut the storage (read-only) ---------------------------------------------------------------
        cut = drills.drill("checkpoint_storage", node, mode="cut", **common)
        assert cut.rc == 0, cut.output[-4000:]
        document = drills.report(cut)
        assert {s["step"]: s["verdict"] for s in document["steps"]}["detected"] == "pass", document["steps"]
        assert "reason=EROFS" in Drills.output(tmp_path / "job")
        # After the rollback: saves work again, the last good checkpoint was kept, the volume is as before.
        mark = len(Drills.output(tmp_path / "job"))
        wait_for(lambda: "\ncheckpoint time=" in Drills.output(tmp_path / "job")[mark:], 60,
                 what="a save after the rollback")
        assert drills.job(job)["JobState"] == "RUNNING"
        after = drills.node_snapshot(node)
        for key in ("mounts", "checkpoint_files", "fake_gpus", "labels", "taints", "lab_processes"):
            assert after[key] == before[key], key
    finally:
        drills.cancel(job)
        wait_for(lambda: drills.job(job).get("JobState") not in ("RUNNING", "COMPLETING"), 60, what="job gone")
        shutil.rmtree(checkpoints, ignore_errors=True)


def scoring_resume(text, since):
    found = [m for m in re.finditer(r"resume time=(\S+) step=(\d+)", text) if float(m.group(1)) >= since]
    assert found, text[-2000:]
    return {"time": float(found[0].group(1)), "step": int(found[0].group(2))}


def test_a_breached_brake_rolls_the_drill_back_at_once_and_reports_it(drills):
    """Issue 20, drills with brakes: the default brake aborts a drill when more than one node other
    than its target turns unhealthy while it runs. The watch would wait minutes for a fence that never
    comes (self-healing is off here); the brake ends it, the fault is rolled back at once, and the
    report says aborted and why. A bad brake refuses the drill before anything happens."""
    target, others = "gpu-a-001", ["gpu-a-003", "gpu-a-004"]
    bad = drills.drill("gpu_xid", target, chaos_drill_abort_conditions=[{"name": "x", "query": "up", "above": "hot"}])
    assert bad.rc != 0 and "abort_conditions[0].above" in bad.output, bad.output[-2000:]
    assert not drills.ledger().get("drills")
    before = drills.node_snapshot(target)
    saved = {node: fake_gpu_state.read(str(drills.lab.lab_dir / "gpus" / node))["gpus"][0]["temperature"]
             for node in others}
    patient = {"detected": 60, "alerted": 240, "scheduler": 240, "recovered": 240}
    started = time.monotonic()
    running = drills.start_drill("gpu_xid", target, xid=79, duration=300, chaos_drill_deadlines=patient)
    try:
        wait_for(lambda: any(f.get("state") == "active" and f["node"] == target
                             for f in drills.ledger().get("faults", {}).values()), 180, 0.5,
                 what="the fault on %s active" % target)
        for node in others:  # too hot: each agent's verdict turns degraded
            fake_gpu_state.set_fields(str(drills.lab.lab_dir / "gpus" / node), 0, temperature=110)
        output = running.communicate(timeout=180)[0]
        took = time.monotonic() - started
    finally:
        if running.poll() is None:
            drills.kill(running)
        for node, temperature in saved.items():
            fake_gpu_state.set_fields(str(drills.lab.lab_dir / "gpus" / node), 0, temperature=temperature)
    document = drills.report(PlaybookResult(rc=running.returncode, output=output))
    assert document["result"] == "aborted", document["result"]
    assert document["abort_reason"].startswith("abort condition other_nodes_unhealthy breached: "), document
    assert 'node!~"gpu-a-001"' in document["abort_reason"]  # the target is left out of the count
    assert took < 200, took  # not the 240 s the fence's deadline would have taken
    assert [e["name"] for e in document["events"]].count("abort") == 1
    assert all(f["rollback"] == "done" for f in document["faults"]), document["faults"]
    assert wait_equal(lambda: drills.node_snapshot(target), before, 60) == before
