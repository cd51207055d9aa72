"""The NUMA chaos family against the lab's real Slurm and a real stress-ng: each drill
(cpu_saturation, numa_remote_memory, numa_memory_pressure) runs its load as a Slurm job on the
target beside whatever runs there (seen RUNNING, stress-ng processes of that job on the machine),
the rollback cancels it, and the node's Slurm state and jobs are what they were; a controller
SIGKILLed mid-drill leaves the load running, and chaos-stop.yml ends it.

What is real: Slurm, the job, stress-ng saturating one CPU or holding its memory (bound with
numactl). What is not: the lab's nodes are slurmd daemons on one machine with one NUMA node (the
unit tests cover the NUMA placement on 2- and 4-node topologies); nothing measures the load, so
detection is not observable and the report names the gap.
"""

from __future__ import annotations

import os
import time
from types import SimpleNamespace
from typing import Dict, List

import pytest
from agent_probe import wait_for
from drill_probe import OPT_IN, Drills

pytestmark = [pytest.mark.integration, pytest.mark.lab]

NODE = "gpu-a-003"
ROOM = {"max_nodes": 4, "max_percent": 100}
# Nothing to detect or fence: the observation window is the alert deadline from the injection.
WINDOW = {"detected": 2, "alerted": 6, "scheduler": 2, "recovered": 2}
PATIENT = {"detected": 300, "alerted": 300, "scheduler": 300, "recovered": 300}
PREFIX = "gpufleet-chaos-numa-"


@pytest.fixture(scope="module")
def drills(lab):
    drills = Drills(lab)
    before = (drills.lab.kube().read_node(NODE).metadata.labels or {}).get(OPT_IN)
    drills.opt_in([NODE])
    yield drills
    drills.lab.kube().patch_node(NODE, {"metadata": {"labels": {OPT_IN: before}}})


def jobs_on_node(drills) -> Dict[str, str]:
    """The node's jobs in Slurm: id -> 'name|state'."""
    out = drills.lab.slurm("squeue", "--noheader", "--states=all", "-w", NODE, "--format=%i|%j|%T")
    return {line.split("|")[0]: line.split("|", 1)[1] for line in out.splitlines() if line.strip()}


def load_jobs(drills) -> Dict[str, str]:
    return {job: text for job, text in jobs_on_node(drills).items()
            if text.startswith(PREFIX) and text.split("|")[1] in ("RUNNING", "PENDING", "COMPLETING")}


def stress_pids(job_id: str) -> List[int]:
    """stress-ng processes on this machine that belong to the Slurm job (SLURM_JOB_ID in their environment)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % entry, "rb") as handle:
                argv = handle.read().split(b"\0")
            with open("/proc/%s/environ" % entry, "rb") as handle:
                env = handle.read().split(b"\0")
        except OSError:
            continue
        if argv and os.path.basename(argv[0]) == b"stress-ng" and b"SLURM_JOB_ID=%s" % job_id.encode() in env:
            found.append(int(entry))
    return found


def fault_active(drills) -> bool:
    return any(f.get("state") == "active" and f["node"] == NODE for f in drills.ledger().get("faults", {}).values())


def running_load(drills) -> str:
    """The one load job of this node's fault, once Slurm runs it and its stress-ng is up."""
    holder = {}

    def found() -> bool:
        running = [job for job, text in load_jobs(drills).items() if text.endswith("|RUNNING")]
        if len(running) == 1 and stress_pids(running[0]):
            holder["job"] = running[0]
            return True
        return False

    wait_for(found, 60, 0.3, what="the stress-ng load job RUNNING on %s" % NODE)
    return holder["job"]


# Each load kept small: the lab machine is also the CI machine (2 % of free memory, one worker).
# 60 s: the drill's rollback must find it still running to prove it cancels it. The drill ends a few
# seconds after the injection (WINDOW), but on a loaded CI machine that was once more than 12 s, and a
# load that had ended on its own left the rollback nothing to cancel.
LOADS = {
    "cpu_saturation": {"seconds": 60, "workers": 1},
    "numa_remote_memory": {"seconds": 60, "workers": 1, "memory_percent": 2},
    "numa_memory_pressure": {"seconds": 60, "workers": 1, "memory_percent": 2},
}


@pytest.mark.parametrize("experiment", sorted(LOADS))
def test_each_load_runs_beside_and_leaves_nothing(drills, experiment):
    states, jobs = drills.slurm_states(), jobs_on_node(drills)
    assert not load_jobs(drills), "a load job left over from an earlier run"
    started = time.monotonic()
    run = drills.start_drill(experiment, NODE, params=LOADS[experiment], duration=90,
                             chaos_drill_deadlines=WINDOW, chaos_drill_blast_radius=ROOM, chaos_drill_verify_timeout=30)
    try:
        wait_for(lambda: fault_active(drills), 90, 0.3, what="the %s fault active in the ledger" % experiment)
        job = running_load(drills)
        fault = next(f for f in drills.ledger()["faults"].values() if f["node"] == NODE)
        assert load_jobs(drills)[job] == "%s%s|RUNNING" % (PREFIX, fault["id"])
        output, _err = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            drills.kill(run)
    took = time.monotonic() - started
    assert run.returncode == 0, output[-4000:]
    assert not load_jobs(drills) and not stress_pids(job), "the load outlived the rollback"
    assert drills.slurm_states() == states
    # The node's jobs as before, but for the load job, now finished (CANCELLED) in squeue's memory.
    assert {k: v for k, v in jobs_on_node(drills).items() if k != job} == jobs
    document = drills.report(SimpleNamespace(output=output))
    steps = {s["step"]: s["verdict"] for s in document["steps"]}
    assert steps["detected"] == "not_observable", steps
    assert any("node_pressure" in gap["add"] for gap in document["gaps"]), document["gaps"]
    [row] = document["faults"]
    assert row["rollback"] == "done" and row.get("by") in (None, "drill"), row  # the drill's own rollback
    assert any("cancelled the load job %s" % job in a for a in row["actions"]), row
    assert not drills.ledger().get("faults", {}).get(row["id"])
    # What the lab cannot do is said, not hidden: one NUMA node, so no memory is remote.
    if experiment == "numa_remote_memory":
        assert any("no memory is remote" in text for text in document["simulated"]), document["simulated"]
    print("\nNUMA %s DRILL: %.1fs (inject -> stress-ng job %s RUNNING on %s -> cancelled)"
          % (experiment.upper(), took, job, NODE))


def test_a_killed_controller_is_finished_by_chaos_stop(drills):
    states = drills.slurm_states()
    started = time.monotonic()
    run = drills.start_drill("cpu_saturation", NODE, params={"seconds": 40, "workers": 1, "load_percent": 50},
                             duration=120, chaos_drill_deadlines=PATIENT, chaos_drill_blast_radius=ROOM)
    try:
        wait_for(lambda: fault_active(drills), 90, 0.3, what="the cpu_saturation fault active in the ledger")
        job = running_load(drills)
        drills.kill(run)
        assert job in load_jobs(drills) and stress_pids(job), "the load outlived its controller"
        stopped = drills.stop()
        assert stopped.rc == 0, stopped.output[-3000:]
        took = time.monotonic() - started
        assert not load_jobs(drills) and not stress_pids(job)
        assert drills.slurm_states() == states
        ledger = drills.ledger()
        assert ledger["kill_switch"]["on"] is True and ledger["faults"] == {}
        assert any(f["node"] == NODE and f["rolled_back_by"] == "kill_switch" for f in ledger["history"])
    finally:
        if run.poll() is None:
            drills.kill(run)
        cleared = drills.stop(clear=True)
    assert cleared.rc == 0 and drills.ledger()["kill_switch"]["on"] is False
    print("\nNUMA KILL: %.1fs from start to the load cancelled by chaos-stop" % took)
