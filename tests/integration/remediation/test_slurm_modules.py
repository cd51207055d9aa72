# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""slurm_node and slurm_jobs through ansible-playbook against the lab's real slurmctld and slurmd (Slurm 22.05).

Each test runs one small playbook whose tasks register every result and write them to a JSON
file; the test reads it and asserts, and checks Slurm itself with scontrol/squeue. Every test
leaves the lab as it found it (nodes resumed and responding, its jobs cancelled), pass or fail:
the session lab is shared by the tests after these.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import pytest
import yaml
from lab_harness import VENV_BIN

pytestmark = [pytest.mark.integration, pytest.mark.lab]

OURS = "gpufleet: Xid79 GPU-it (remediation r-it)"
OURS_DOWN = "gpufleet: Xid79 GPU-it down (remediation r-it)"
HUMAN = "hardware check by alice"
SLINKY = "slurm-operator: node is cordoned"


def wait_for(what: str, check: Callable[[], bool], timeout: float = 30, step: float = 0.3) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("%s: not within %ss" % (what, timeout))
        time.sleep(step)


def show_node(lab, name: str) -> Dict[str, str]:
    text = lab.slurm("scontrol", "--future", "--oneliner", "show", "node", name)
    # Reason is the last field and holds spaces: split it off before the key=value words.
    head, _sep, reason = text.strip().partition(" Reason=")
    fields = dict(item.split("=", 1) for item in head.split() if "=" in item)
    fields["Reason"] = reason.rsplit(" [", 1)[0] if reason else ""
    return fields


def job_fields(lab, job_id: str) -> Dict[str, str]:
    text = lab.slurm("scontrol", "--oneliner", "show", "job", job_id, check=False)
    return dict(item.split("=", 1) for item in text.split() if "=" in item)


def snapshot(lab) -> str:
    """Every node's state and reason, and every job's state: what a refused task must leave alone."""
    nodes = lab.slurm("sinfo", "--Node", "--noheader", "--format=%N|%T|%E")
    return nodes + lab.slurm("squeue", "--all", "--noheader", "--format=%i|%T|%N")


def play(lab, tmp_path: Path, tasks: List[Dict[str, Any]], diff: bool = False) -> Dict[str, Any]:
    """Run the tasks on localhost; every task registers ``r<index>``; return them by register name."""
    names = []
    for index, task in enumerate(tasks):
        task.setdefault("register", "r%d" % index)
        names.append(task["register"])
    out = tmp_path / "results.json"
    saved = "{{ {%s} | to_json }}" % ", ".join("'%s': %s" % (name, name) for name in names)
    playbook = tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump([{
        "name": "slurm modules against the lab",
        "hosts": "localhost",
        "gather_facts": False,
        "vars": {"ansible_python_interpreter": sys.executable},
        "module_defaults": {
            "gpufleet.resilience.slurm_node": {"slurm_conf": str(lab.slurm_conf)},
            "gpufleet.resilience.slurm_jobs": {"slurm_conf": str(lab.slurm_conf)},
            "gpufleet.resilience.slurm_node_info": {"slurm_conf": str(lab.slurm_conf)},
        },
        "tasks": [*tasks, {"name": "Save the results", "ansible.builtin.copy": {"content": saved, "dest": str(out)}}],
    }]))
    argv = [str(VENV_BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local", str(playbook)]
    done = subprocess.run(argv + (["--diff"] if diff else []), env=lab.env(), capture_output=True, text=True,
                          timeout=240, check=False)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    return json.loads(out.read_text())


def node_task(name: str, state: str, reason: Optional[str] = None, check: bool = False, **extra) -> Dict[str, Any]:
    args = dict(name=name, state=state, **extra)
    if reason is not None:
        args["reason"] = reason
    return {"name": "%s %s%s" % (state, name, " (check mode)" if check else ""),
            "gpufleet.resilience.slurm_node": args, "check_mode": check}


def jobs_task(node: str, check: bool = False, register: Optional[str] = None, **args) -> Dict[str, Any]:
    task = {"name": "jobs of %s%s" % (node, " (check mode)" if check else ""),
            "gpufleet.resilience.slurm_jobs": dict(node=node, **args), "check_mode": check}
    if register:
        task["register"] = register
    return task


@pytest.fixture(scope="module")
def active(lab) -> List[str]:
    pool = lab.extra_vars["gpufleet_node_pools"][0]
    return ["%s-%03d" % (pool["name"], index) for index in range(1, pool["count"] + 1)]


@pytest.fixture
def restore(lab, active):
    """After the test: cancel its jobs, resume every fenced active node, wait until each responds."""
    jobs: List[str] = []
    yield jobs
    for job_id in jobs:
        lab.slurm("scancel", job_id, check=False)
    for name in active:
        node = show_node(lab, name)
        if node["State"].startswith("DOWN") or "DRAIN" in node["State"] or "FAIL" in node["State"]:
            lab.slurm("scontrol", "update", "NodeName=" + name, "State=RESUME")
    for name in active:
        wait_for("%s idle and responding" % name,
                 lambda name=name: show_node(lab, name)["State"] in ("IDLE", "MIXED", "ALLOCATED"), timeout=60)


def test_slurm_node_ladder_drain_down_resume(lab, tmp_path, active, restore):
    name = active[-1]
    before = show_node(lab, name)
    assert before["State"] == "IDLE", before
    results = play(lab, tmp_path, [
        node_task(name, "drain", OURS, check=True),
        node_task(name, "drain", OURS),
        node_task(name, "drain", OURS, check=True),
        node_task(name, "drain", OURS),
        node_task(name, "down", OURS_DOWN),
        node_task(name, "down", OURS_DOWN),
        node_task(name, "resume", check=True),
        node_task(name, "resume"),
        node_task(name, "resume", check=True),
        node_task(name, "resume"),
    ], diff=True)
    r = [results["r%d" % index] for index in range(len(results))]
    command = ["scontrol", "update", "NodeName=" + name, "State=DRAIN", "Reason=" + OURS]
    # 1. check mode: would drain, and did not.
    assert (r[0]["changed"], r[0]["action"], r[0]["command"]) == (True, "set", command)
    assert r[0]["diff"] == {"before": {"state": "IDLE", "reason": None},
                            "after": {"state": "IDLE+DRAIN", "reason": OURS},
                            "before_header": name, "after_header": name}
    # 2. apply (its "before" shows check mode changed nothing), 3. check again, 4. apply again.
    assert (r[1]["changed"], r[1]["action"], r[1]["command"]) == (True, "set", command)
    assert r[1]["diff"]["before"] == {"state": "IDLE", "reason": None}
    assert (r[1]["node"]["state"], r[1]["node"]["flags"], r[1]["node"]["reason"]) == ("IDLE", ["DRAIN"], OURS)
    assert [(x["changed"], x["action"], x["command"]) for x in r[2:4]] == [(False, "none", [])] * 2
    # Our drain to DOWN, with a new reason; slurmctld keeps the DRAIN flag on a node it sets DOWN.
    assert (r[4]["changed"], r[4]["command"][3:]) == (True, ["State=DOWN", "Reason=" + OURS_DOWN])
    assert r[4]["node"]["state"] == "DOWN" and r[4]["node"]["reason"] == OURS_DOWN
    assert r[4]["diff"] == {"before": {"state": "IDLE+DRAIN", "reason": OURS},
                            "after": {"state": "DOWN+DRAIN", "reason": OURS_DOWN},
                            "before_header": name, "after_header": name}
    assert (r[5]["changed"], r[5]["action"]) == (False, "none")
    # Resume: check, apply, check, apply.
    assert (r[6]["changed"], r[6]["command"]) == (True, ["scontrol", "update", "NodeName=" + name, "State=RESUME"])
    assert r[7]["changed"] and r[7]["node"]["state"] == "IDLE" and r[7]["node"]["reason"] is None
    assert "DRAIN" not in r[7]["node"]["flags"] and r[7]["diff"]["before"]["state"] == "DOWN+DRAIN"
    assert [(x["changed"], x["action"]) for x in r[8:10]] == [(False, "none")] * 2
    node = show_node(lab, name)
    assert node["State"].split("+")[0] == "IDLE" and "DRAIN" not in node["State"] and node["Reason"] == ""


def test_someone_elses_fences_are_kept_and_noted(lab, tmp_path, active, restore):
    human, slinky = active[-1], active[-2]
    lab.slurm("scontrol", "update", "NodeName=" + human, "State=DRAIN", "Reason=" + HUMAN)
    lab.slurm("scontrol", "update", "NodeName=" + slinky, "State=DOWN", "Reason=" + SLINKY)
    results = play(lab, tmp_path, [
        node_task(human, "down", OURS),
        node_task(human, "resume"),
        node_task(slinky, "drain", OURS),
        node_task(slinky, "resume"),
        node_task(human, "resume", force=True, check=True),
        node_task(human, "resume", force=True),
    ])
    r = [results["r%d" % index] for index in range(len(results))]
    # Kept: no write, the reason noted, a warning; the node as it was (read back by each task).
    for kept, reason in ((r[0], HUMAN), (r[1], HUMAN), (r[2], SLINKY), (r[3], SLINKY)):
        assert (kept["changed"], kept["action"], kept["foreign_reason"], kept["command"]) == (
            False, "kept_foreign", reason, []), kept
        assert any(reason in warning for warning in kept["warnings"]), kept
        assert kept["node"]["reason"] == reason
    assert (r[1]["node"]["state"], r[1]["node"]["flags"]) == ("IDLE", ["DRAIN"])
    assert r[3]["node"]["state"] == "DOWN"
    # force resumes someone else's fence, and says whose it was.
    assert (r[4]["changed"], r[4]["action"], r[4]["foreign_reason"]) == (True, "set", HUMAN)
    assert r[5]["changed"] and "DRAIN" not in r[5]["node"]["flags"] and r[5]["node"]["reason"] is None
    slinky_now = show_node(lab, slinky)
    assert slinky_now["State"].startswith("DOWN") and slinky_now["Reason"] == SLINKY  # never touched


def test_bad_input_names_the_cause_and_changes_nothing(lab, tmp_path, active, restore):
    dead = tmp_path / "dead"
    dead.mkdir()
    # slurmctld down, as a client sees it: a configuration whose controller port nobody listens on.
    conf = lab.slurm_conf.read_text().splitlines()
    (dead / "slurm.conf").write_text("\n".join(
        "SlurmctldPort=1" if line.startswith("SlurmctldPort=") else line for line in conf) + "\n")
    spare = "gpu-a-%03d" % (len(active) + 1)
    before = snapshot(lab)
    failing = [
        node_task("gpu-z-999", "drain", OURS),
        node_task(active[0], "undrain", OURS),
        node_task(active[0], "drain"),
        node_task("gpu-a-[001-002]", "down", OURS),
        node_task(spare, "drain", OURS),
        node_task(active[0], "drain", OURS, slurm_conf=str(dead / "slurm.conf"), timeout=20),
        jobs_task("gpu-z-999", state="evacuated"),
        jobs_task(active[0], state="evacuated", signal="TERM;KILL"),
    ]
    for task in failing:
        task["ignore_errors"] = True
    r = play(lab, tmp_path, failing)
    r = [r["r%d" % index] for index in range(len(r))]
    assert all(result["failed"] and not result.get("changed") for result in r), r
    assert "Slurm does not know node(s) gpu-z-999" in r[0]["msg"] and r[0]["nodes"] == ["gpu-z-999"]
    assert "value of state must be one of: drain, down, resume, got: undrain" in r[1]["msg"]
    assert "state is drain but all of the following are missing: reason" in r[2]["msg"]
    assert r[3]["field"] == "name" and "one node name" in r[3]["msg"]
    assert r[4]["field"] == "name" and "%s is a FUTURE node" % spare in r[4]["msg"]
    assert "Unable to contact slurm controller" in r[5]["msg"] and r[5]["cmd"][0] == "scontrol"
    assert "Slurm does not know node(s) gpu-z-999" in r[6]["msg"]
    assert r[7]["field"] == "signal" and "'TERM;KILL'" in r[7]["msg"]
    assert snapshot(lab) == before


def submit(lab, restore, *argv: str) -> str:
    job_id = lab.slurm("sbatch", "--parsable", "--gres=gpu:1", "--chdir=/tmp", *argv).strip().split(";")[0]
    restore.append(job_id)
    return job_id


def test_evacuation_of_a_train_sim_job(lab, tmp_path, restore):
    """train_sim gets SIGTERM, saves a checkpoint, exits 75; slurmctld requeues it; it resumes on another node."""
    run_dir = lab.lab_dir / "storage" / "checkpoints" / ("it-evacuate-%d" % time.time_ns())
    output = run_dir.with_suffix(".out")
    job_id = submit(lab, restore, "--requeue", "--open-mode=append", "--output=%s" % output, "--job-name=it-train",
                    str(lab.lab_dir / "bin" / "train_sim"), "--checkpoint-dir", str(run_dir), "--steps", "100000",
                    "--keep", "1000")
    wait_for("train_sim running", lambda: job_fields(lab, job_id).get("JobState") == "RUNNING")
    node = job_fields(lab, job_id)["NodeList"]
    wait_for("train_sim stepping", lambda: output.is_file() and " step=" in output.read_text())
    results = play(lab, tmp_path, [
        node_task(node, "drain", OURS),
        jobs_task(node),
        jobs_task(node, check=True, state="evacuated", grace=30, poll=0.25),
        jobs_task(node, register="after_check"),
        jobs_task(node, state="evacuated", grace=30, poll=0.25),
        jobs_task(node, check=True, state="evacuated", grace=30, poll=0.25),
        jobs_task(node, state="evacuated", grace=30, poll=0.25),
    ])
    listed, would, applied, check_again, apply_again = (results[key] for key in ("r1", "r2", "r4", "r5", "r6"))
    assert listed["changed"] is False and [job["job_id"] for job in listed["jobs"]] == [job_id]
    assert listed["jobs"][0]["name"] == "it-train" and listed["jobs"][0]["requeue"] is True
    # Check mode: says it would signal and (if the job stayed) requeue; the job still runs there.
    assert would["changed"] and would["command"] == [["scancel", "--signal=TERM", "--full", job_id],
                                                     ["scontrol", "requeue", job_id]]
    assert would["jobs"][0]["fate"] == "requeued" and would["waited"] == 0
    assert [(job["job_id"], job["state"]) for job in results["after_check"]["jobs"]] == [(job_id, "RUNNING")]
    # Apply: one SIGTERM, the job left by itself (exit 75, RequeueExit) well within the grace.
    assert applied["changed"] and applied["signalled"] == [job_id]
    assert applied["command"] == [["scancel", "--signal=TERM", "--full", job_id]]
    (fate,) = applied["jobs"]
    assert (fate["job_id"], fate["signalled"], fate["fate"]) == (job_id, True, "left")
    assert fate["state"] in ("PENDING", "RUNNING"), fate
    assert applied["waited"] < 10
    # Nothing left on the node: check mode and a second run change nothing.
    for again in (check_again, apply_again):
        assert (again["changed"], again["jobs"], again["command"]) == (False, [], [])
    text = output.read_text()
    interrupted = [line for line in text.splitlines() if line.startswith("interrupted ")]
    assert len(interrupted) == 1 and "signal=SIGTERM" in interrupted[0] and "exit=75" in interrupted[0], text[-2000:]
    step = int(interrupted[0].split(" step=")[1].split()[0])
    assert (run_dir / ("ckpt-%09d.json" % step)).is_file()
    # slurmctld requeued it (Restarts=1) and it resumes from that checkpoint on another node.
    wait_for("train_sim running again", lambda: job_fields(lab, job_id).get("JobState") == "RUNNING", timeout=30)
    again = job_fields(lab, job_id)
    assert again["Restarts"] == "1" and again["NodeList"] != node, again
    wait_for("train_sim resumed", lambda: "resume " in output.read_text(), timeout=15)
    resumed = [line for line in output.read_text().splitlines() if line.startswith("resume ")]
    assert " step=%d " % step in resumed[0] + " ", resumed


# The ways a training job is submitted, each a requeueable batch job: the program as the batch
# script is the case above; these run it inside a shell, which --full signals too.
SCRIPT_FORMS = {
    # sbatch --wrap: /bin/sh runs the program; the shell dies of the signal, the job ends FAILED.
    "wrap": None,
    # A bash script that runs it as a step with srun.
    "srun": "#!/bin/bash\nsrun {train}\n",
    # A bash script that traps the signal, forwards it and exits with the program's code (75): the
    # pattern docs/remediation.md gives (a signal ends `wait` early, so it waits until the program exits).
    "trap": "#!/bin/bash\n{train} &\nchild=$!\ntrap 'kill -TERM \"$child\" 2>/dev/null' TERM\n"
            "while wait \"$child\"; status=$?; kill -0 \"$child\" 2>/dev/null; do :; done\nexit \"$status\"\n",
}


def test_a_job_in_any_script_form_comes_back_from_its_checkpoint(lab, tmp_path, active, restore):
    """Jobs run through a shell (--wrap, bash + srun, bash that forwards the signal) are requeued and
    resume from a checkpoint on another node; a job that ends successfully in the grace is left alone."""
    train = str(lab.lab_dir / "bin" / "train_sim")
    runs = {}
    for form, script in SCRIPT_FORMS.items():
        run_dir = lab.lab_dir / "storage" / "checkpoints" / ("it-form-%s-%d" % (form, time.time_ns()))
        output = run_dir.with_suffix(".out")
        command = "%s --checkpoint-dir %s --steps 100000 --checkpoint-every 20 --keep 1000" % (train, run_dir)
        if script is None:
            body = ["--wrap", command]
        else:
            path = tmp_path / ("%s.sh" % form)
            path.write_text(script.format(train=command))
            body = [str(path)]
        job_id = submit(lab, restore, "--requeue", "--open-mode=append", "--output=%s" % output,
                        "--job-name=it-%s" % form, *body)
        runs[form] = (job_id, run_dir, output)
    done = tmp_path / "done.sh"
    done.write_text("#!/bin/bash\ntrap 'exit 0' TERM\nwhile true; do sleep 1; done\n")
    finisher = submit(lab, restore, "--requeue", "--output=/dev/null", "--job-name=it-done", str(done))
    for form, (_job_id, _run_dir, output) in runs.items():
        wait_for("%s job stepping" % form, lambda output=output: output.is_file() and
                 len([ln for ln in output.read_text().splitlines() if ln.startswith("checkpoint ")]) >= 2, timeout=60)
    wait_for("the finisher running", lambda: job_fields(lab, finisher).get("JobState") == "RUNNING")
    first_nodes = {form: job_fields(lab, job_id)["NodeList"] for form, (job_id, _d, _o) in runs.items()}
    nodes = sorted(set(first_nodes.values()) | {job_fields(lab, finisher)["NodeList"]})
    assert len(nodes) < len(active), "at least one node must stay to take the requeued jobs: %s" % nodes
    tasks = [node_task(node, "drain", OURS) for node in nodes]
    tasks += [jobs_task(node, state="evacuated", grace=30, poll=0.25, register="evac_%d" % index)
              for index, node in enumerate(nodes)]
    results = play(lab, tmp_path, tasks)
    reported = {job["job_id"]: job for index in range(len(nodes)) for job in results["evac_%d" % index]["jobs"]}

    # The finisher ended COMPLETED within the grace: left alone, not requeued.
    assert (reported[finisher]["fate"], reported[finisher]["state"]) == ("left", "COMPLETED"), reported[finisher]
    assert job_fields(lab, finisher)["Restarts"] == "0"
    for form, (job_id, run_dir, output) in runs.items():
        fate = reported[job_id]
        # str(): pytest shortens a dict in the message, and the note is what tells the cases apart.
        assert fate["signalled"] and fate["fate"] in ("left", "requeued"), str((form, fate))
        if form == "trap":
            # Exit 75 after the checkpoint: slurmctld requeued it by RequeueExit. (22.05's JSON may
            # still read FAILED at the last look: the module reads RequeueExit and leaves it.)
            assert fate["fate"] == "left", str(fate)
        else:
            # The shell died of the signal; the job ended FAILED and the remediation requeued it.
            assert fate["fate"] == "requeued" and "ended FAILED on the signal" in fate["note"], str((form, fate))
        wait_for("%s job running again" % form, lambda job_id=job_id: job_fields(lab, job_id).get("JobState")
                 == "RUNNING" and job_fields(lab, job_id)["NodeList"] not in nodes, timeout=60)
        assert job_fields(lab, job_id)["Restarts"] == "1", (form, job_fields(lab, job_id))
        wait_for("%s job resumed" % form, lambda output=output: "resume " in output.read_text(), timeout=30)
        resumed = next(ln for ln in output.read_text().splitlines() if ln.startswith("resume "))
        step = int(resumed.split(" step=")[1].split()[0])
        # From a checkpoint it saved before the signal (or on it), not from the start.
        assert step >= 20 and (run_dir / ("ckpt-%09d.json" % step)).is_file(), (form, resumed)


def test_evacuation_requeues_or_cancels_the_jobs_that_stay(lab, tmp_path, active, restore):
    """Jobs that ignore the signal: after the grace the requeueable ones (an array's tasks) are
    requeued by their task ids (12_3, never 12: that would be every task) and the rest cancelled."""
    node = active[0]
    # USR1 ignored by the script and (inherited) by its sleep, so the grace runs out; TERM still
    # ends them at once when requeued or cancelled.
    stubborn = "trap '' USR1; while true; do sleep 1; done"
    array = submit(lab, restore, "--requeue", "--array=0-1", "--nodelist=" + node, "--output=/dev/null",
                   "--wrap", stubborn)
    single = submit(lab, restore, "--no-requeue", "--nodelist=" + node, "--output=/dev/null", "--wrap", stubborn)
    tasks = ["%s_0" % array, "%s_1" % array]
    wait_for("three jobs running", lambda: all(job_fields(lab, job).get("JobState") == "RUNNING"
                                               for job in [*tasks, single]), timeout=40)
    results = play(lab, tmp_path, [
        node_task(node, "drain", OURS),
        jobs_task(node, state="evacuated", signal="USR1", grace=2, poll=0.5),
        jobs_task(node, state="evacuated", signal="USR1", grace=2, poll=0.5, then="cancel", check=True),
    ])
    evacuation = results["r1"]
    fates = {job["job_id"]: (job["signalled"], job["fate"], job["requeue"]) for job in evacuation["jobs"]}
    assert fates == {tasks[0]: (True, "requeued", True), tasks[1]: (True, "requeued", True),
                     single: (True, "cancelled", False)}, evacuation
    assert 2 <= evacuation["waited"] < 15
    assert sorted(evacuation["signalled"]) == sorted([*tasks, single])
    assert ["scontrol", "requeue", tasks[0]] in evacuation["command"]
    assert ["scancel", single] in evacuation["command"]
    assert not any(argv[-1] == array for argv in evacuation["command"])
    states = {job["job_id"]: job["state"] for job in evacuation["jobs"]}
    # What Slurm shows a moment later: a job still ending its processes is COMPLETING.
    assert states[single] in ("CANCELLED", "COMPLETING")
    assert {states[task] for task in tasks} <= {"PENDING", "COMPLETING"}
    # Nothing to do any more: the jobs are gone, or still ending (COMPLETING), which nobody signals.
    again = results["r2"]
    assert (again["changed"], again["command"]) == (False, []) and {job["fate"] for job in again["jobs"]} <= {"left"}
    with contextlib.suppress(AssertionError):
        wait_for("the requeued tasks pending", lambda: all(job_fields(lab, job).get("JobState") == "PENDING"
                                                           for job in tasks), timeout=10)


def test_validate_auto_runs_what_the_node_has(lab, tmp_path, active, restore):
    """node_validate's backend auto (the default off the lab), as a real Slurm job in a reservation: a node
    with neither dcgmi nor gpu_burn on the job's PATH is not validated and says so, fenced again with the
    fence's own reason; with a gpu_burn on it (our stand-in: the lab's gpu_burn_sim, reading this node's
    simulated GPUs), the burn runs and is judged."""
    name = active[-1]
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "gpu_burn").write_text("#!/bin/sh\nexec %s --state-dir %s --seconds 1\n" % (
        lab.lab_dir / "bin" / "gpu_burn_sim", lab.lab_dir / "gpus" / name))
    (tools / "gpu_burn").chmod(0o755)
    output_dir = tmp_path / "validation"
    output_dir.mkdir()
    output_dir.chmod(0o777)  # the job's user writes there
    lab.slurm("scontrol", "update", "NodeName=" + name, "State=DRAIN", "Reason=" + OURS)
    validate = dict(node=name, reason=OURS, backend="auto", seconds=1, output_dir=str(output_dir),
                    slurm_conf=str(lab.slurm_conf))
    path = lab.env()["PATH"]
    results = play(lab, tmp_path, [
        {"name": "auto on a node with no tool", "gpufleet.resilience.node_validate": dict(
            validate, remediation_id="r-it-auto-none"), "register": "no_tool"},
        {"name": "auto on a node with gpu_burn", "gpufleet.resilience.node_validate": dict(
            validate, remediation_id="r-it-auto-burn"), "environment": {"PATH": "%s:%s" % (tools, path)},
         "register": "burn"},
    ])
    none, burn = results["no_tool"], results["burn"]
    assert none["passed"] is None and none["skipped"].startswith("no validation tool on the node"), none
    assert none["actions"][-2] == "drained %s: %s" % (name, OURS), none["actions"]
    assert Path(none["output"]).read_text().splitlines()[0] == "gpufleet-validate: none"
    assert burn["passed"] is True and burn["tool"] == "gpu_burn" and burn["verdict"] == "ok", burn
    assert "GPU 7: OK" in Path(burn["output"]).read_text()
    node = show_node(lab, name)
    assert "DRAIN" in node["State"] and node["Reason"] == OURS, node
    assert "gpufleet-validate-" not in lab.slurm("scontrol", "show", "reservation", check=False)
