"""The NCCL environment drill against the lab's real Slurm: inject -> a job started on the target sees
the variables (through the lab's TaskProlog) -> rollback -> the files byte-identical to before and a
job started after sees none; and a controller killed mid-drill, finished by chaos-stop.yml.

No NCCL and no nccl-tests run here: what is real is Slurm's TaskProlog putting the variables into the
job's environment (slurm_taskprolog) and the per-node nccl.conf that NCCL_CONF_FILE points a job's
NCCL at (nccl_conf); the bandwidth figures are unit-tested on all_reduce_perf's output.
"""

from __future__ import annotations

import hashlib
import json
import stat
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from agent_probe import wait_for
from drill_probe import OPT_IN, Drills
from lab_harness import REPO, VENV_BIN

from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos.nccl_vars import parse_env_output

pytestmark = [pytest.mark.integration, pytest.mark.lab]

NODE = "gpu-a-002"
# Other drills may hold other nodes of the pool meanwhile: this one must not be refused for them.
ROOM = {"max_nodes": 4, "max_percent": 100}
# Nothing to detect or fence: the observation ends when the alert deadline (from the injection)
# does, which is the window in which the test's job starts on the node (it took 0.5 s under load 7).
WINDOW = {"detected": 2, "alerted": 8, "scheduler": 2, "recovered": 2}
PATIENT = {"detected": 300, "alerted": 300, "scheduler": 300, "recovered": 300}
PROBE = 'env | grep "^NCCL_" | sort; if [ -n "$NCCL_CONF_FILE" ]; then echo "--- conf"; cat "$NCCL_CONF_FILE"; fi'


@pytest.fixture(scope="module")
def drills(lab):
    drills = Drills(lab)
    before = (drills.lab.kube().read_node(NODE).metadata.labels or {}).get(OPT_IN)
    drills.opt_in([NODE])
    yield drills
    drills.lab.kube().patch_node(NODE, {"metadata": {"labels": {OPT_IN: before}}})


@pytest.fixture()
def node_dir(drills):
    """The node's NCCL directory under the lab (the role makes <lab>/nccl); absent again afterwards."""
    path = drills.lab.lab_dir / "nccl" / NODE
    assert path.parent.is_dir(), "the slurm role's lab makes %s (rerun one-click)" % path.parent
    assert not path.exists(), "left over from an earlier run: %s" % sorted(path.iterdir())
    yield path
    if path.exists():
        for child in path.iterdir():
            child.unlink()
        path.rmdir()


def state(directory: Path):
    """Every file of the directory: name -> (sha256, mode); None when the directory is absent."""
    if not directory.exists():
        return None
    return {p.name: (hashlib.sha256(p.read_bytes()).hexdigest(), stat.S_IMODE(p.stat().st_mode))
            for p in sorted(directory.iterdir())}


def job_sees(drills, tmp_path: Path, name: str) -> str:
    """What a job started on the node now prints: its NCCL_ variables (and the nccl.conf it is pointed at)."""
    out = tmp_path / ("%s.out" % name)
    job = drills.lab.slurm("sbatch", "--parsable", "-w", NODE, "--job-name=nccl-env-probe", "--output=%s" % out,
                           "--wrap", PROBE).strip()
    fields = drills.lab.wait_job(job, 60)
    assert fields["JobState"] == "COMPLETED", fields
    return out.read_text()


def start_nccl_drill(drills, **extra) -> subprocess.Popen:
    """playbooks/drills/nccl_env.yml (its -e backend= mapping too) in a session of its own, so it can be killed."""
    variables = dict(drills.lab.extra_vars, gpufleet_lab_dir=str(drills.lab.lab_dir), target=NODE)
    variables.update(extra)
    return subprocess.Popen([str(VENV_BIN / "ansible-playbook"), str(REPO / "playbooks" / "drills" / "nccl_env.yml"),
                             "-e", json.dumps(variables)], cwd=REPO, env=drills.lab.env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)


def fault_active(drills) -> bool:
    return any(f.get("state") == "active" and f["node"] == NODE for f in drills.ledger().get("faults", {}).values())


def test_a_job_sees_the_variables_during_the_drill_and_none_after(drills, node_dir, tmp_path):
    """slurm_taskprolog (the lab's default) on a node whose drop-in is absent: absent again after."""
    assert job_sees(drills, tmp_path, "before") == ""
    wanted = {"NCCL_ALGO": "Ring", "NCCL_IB_DISABLE": "1", "NCCL_SOCKET_IFNAME": "^lo,docker0"}
    started = time.monotonic()
    run = drills.start_drill("nccl_env", NODE, params={"vars": wanted}, duration=120,
                             chaos_drill_deadlines=WINDOW, chaos_drill_blast_radius=ROOM, chaos_drill_verify_timeout=30)
    try:
        wait_for(lambda: fault_active(drills), 90, 0.3, what="the nccl_env fault active in the ledger")
        during = job_sees(drills, tmp_path, "during")
        output, _err = run.communicate(timeout=180)
    finally:
        if run.poll() is None:
            drills.kill(run)
    took = time.monotonic() - started
    assert run.returncode == 0, output[-4000:]
    assert parse_env_output(during) == wanted, during
    assert state(node_dir) is None, "the drop-in and its directory are gone"
    assert job_sees(drills, tmp_path, "after") == ""
    document = drills.report(SimpleNamespace(output=output))
    steps = {s["step"]: s["verdict"] for s in document["steps"]}
    assert steps["detected"] == "not_observable" and steps["scheduler"] == "skipped", steps
    # The report names the observability gap: nothing exports a job's NCCL settings.
    assert any("NCCL_" in gap["add"] for gap in document["gaps"]), document["gaps"]
    assert [f["rollback"] for f in document["faults"]] == ["done"]
    assert any("absent before the drill" in action for action in document["faults"][0]["actions"])
    assert "bandwidth not measured: all_reduce_perf not found" in output
    assert not drills.ledger().get("faults", {}).get(document["faults"][0]["id"])
    print("\nNCCL_ENV DRILL: %.1fs (inject -> job saw %d variables -> rollback -> absent again)" % (took, len(wanted)))


def test_a_killed_controller_is_finished_by_chaos_stop_byte_identical(drills, node_dir, tmp_path):
    """nccl_conf on a node whose nccl.conf exists (comments, no final newline, mode 0640): ansible-playbook is
    SIGKILLed while the fault is active; chaos-stop.yml puts the file back byte for byte."""
    node_dir.mkdir()
    conf = node_dir / "nccl.conf"
    conf.write_bytes(b"# site NCCL settings\nNCCL_DEBUG=WARN\nNCCL_ALGO=Tree")
    conf.chmod(0o640)
    before = state(node_dir)
    seen_before = job_sees(drills, tmp_path, "before")
    assert "NCCL_ALGO=Tree" in seen_before and "NCCL_CONF_FILE=%s" % conf in seen_before
    started = time.monotonic()
    run = start_nccl_drill(drills, params={"vars": {"NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple"}},
                           backend="nccl_conf", duration=600, chaos_drill_deadlines=PATIENT,
                           chaos_drill_blast_radius=ROOM)
    try:
        wait_for(lambda: fault_active(drills), 90, 0.3, what="the nccl_env fault active in the ledger")
        during = job_sees(drills, tmp_path, "during")
        conf_seen = during.split("--- conf\n", 1)[1]
        assert "NCCL_ALGO=Ring\n" in conf_seen and "NCCL_PROTO=Simple\n" in conf_seen, during
        assert "NCCL_DEBUG=WARN" in conf_seen and "NCCL_ALGO=Tree" not in conf_seen
        drills.kill(run)
        assert state(node_dir) != before, "the fault outlived its controller"
        stopped = drills.stop()
        assert stopped.rc == 0, stopped.output[-3000:]
        took = time.monotonic() - started
        assert state(node_dir) == before  # nccl.conf byte-identical, same mode, no sidecar left
        assert job_sees(drills, tmp_path, "after") == seen_before
        ledger = drills.ledger()
        assert ledger["kill_switch"]["on"] is True and ledger["faults"] == {}
        assert any(f["node"] == NODE and f["rolled_back_by"] == "kill_switch" for f in ledger["history"])
    finally:
        if run.poll() is None:
            drills.kill(run)
        cleared = drills.stop(clear=True)
    assert cleared.rc == 0 and drills.ledger()["kill_switch"]["on"] is False
    print("\nNCCL_ENV KILL: %.1fs from start to restored by chaos-stop" % took)
