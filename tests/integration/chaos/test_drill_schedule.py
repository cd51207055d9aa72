"""Scheduled drills (playbooks/drill-schedule.yml, role drill_schedule), for real in the lab.

A real cron daemon (Debian's, started here and stopped by its PID) fires the drill's cron line;
the runner runs playbooks/drill.yml through ansible-runner against the lab; the report appears
in the schedule's report directory. The runner's two guards are tested directly: the host lock
(another scheduled drill running) and the gate's exclusive rail (another drill active in the
fleet). The systemd backend is written to a staging directory and checked with
``systemd-analyze verify`` (no systemd runs here, so no timer of it fires).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from drill_probe import Drills
from lab_harness import REPO, VENV_BIN

pytestmark = [pytest.mark.integration, pytest.mark.lab]

NODE = "gpu-a-002"
CRON_DIR = Path("/etc/cron.d")
QUICK = {"chaos_drill_deadlines": {"detected": 30, "alerted": 20, "scheduler": 3, "recovered": 3},
         "chaos_drill_verify_timeout": 60}


@pytest.fixture(scope="module")
def drills(lab):
    drills = Drills(lab)
    drills.opt_in([NODE])
    yield drills
    drills.opt_in([NODE], allowed=False)


@pytest.fixture(scope="module")
def cron():
    """Debian's cron daemon in the foreground, stopped by its PID; the system's own if one runs."""
    pid_file = Path("/run/crond.pid")
    if pid_file.exists():
        pid = pid_file.read_text().strip()
        comm = Path("/proc/%s/comm" % pid) if pid.isdigit() else None
        if comm is not None and comm.exists() and comm.read_text().strip() == "cron":
            yield None
            return
        pid_file.unlink()  # a stopped cron leaves its pid file, and a new one would refuse to start
    daemon = subprocess.Popen(["/usr/sbin/cron", "-f", "-L", "15"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    yield daemon
    daemon.terminate()
    daemon.wait(timeout=30)
    pid_file.unlink(missing_ok=True)


def schedule_vars(drills, base: Path, when: str, backend: str = "cron", **more):
    lab = drills.lab
    variables = {
        "drill_schedule_backend": backend,
        "drill_schedule_dir": str(base / "drills"),
        "drill_schedule_cron_dir": str(CRON_DIR),
        "drill_schedule_systemd_dir": str(base / "systemd"),
        "drill_schedule_systemd_enable": False,
        "drill_schedule_python": str(VENV_BIN / "python"),
        "drill_schedule_inventory": str(REPO / "inventories" / "lab"),
        "drill_schedule_extra_vars": dict(lab.extra_vars, gpufleet_lab_dir=str(lab.lab_dir), **QUICK),
        "drill_schedule_environment": {"ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
                                       "ANSIBLE_COLLECTIONS_PATH": str(REPO / "collections"),
                                       "KUBECONFIG": str(lab.kubeconfig), "SLURM_CONF": str(lab.slurm_conf)},
        "drill_schedule_drills": [{"name": "pytest-thermal", "experiment": "gpu_thermal", "target": NODE,
                                   "when": when, "duration": 120}],
    }
    variables.update(more)
    return variables


def next_minute() -> str:
    """A crontab line for the next whole minute cron will see (two ahead when this one is nearly over)."""
    now = time.gmtime(time.time() + (120 if time.gmtime().tm_sec >= 45 else 60))
    return "%d %d * * *" % (now.tm_min, now.tm_hour)


def test_a_cron_line_fires_a_drill_and_its_report_is_kept(drills, cron, tmp_path):
    lab = drills.lab
    line = CRON_DIR / "gpufleet-drill-pytest-thermal"
    try:
        written = lab.playbook("drill-schedule.yml", extra=schedule_vars(drills, tmp_path, next_minute()))
        assert written.rc == 0, written.output[-4000:]
        assert line.is_file() and "drill_run.py --config" in line.read_text()
        again = lab.playbook("drill-schedule.yml", extra=schedule_vars(drills, tmp_path, next_minute()))
        assert again.rc == 0 and again.changed <= 1, again.output[-4000:]  # only the minute may move on

        last = tmp_path / "drills" / "pytest-thermal" / "reports" / "last-run.json"
        deadline = time.time() + 300
        while not last.exists() and time.time() < deadline:
            time.sleep(2)
        log = tmp_path / "drills" / "pytest-thermal" / "drill.log"
        assert last.exists(), "cron never ran the drill: %s" % (log.read_text() if log.exists() else "no log")
    finally:
        removed = lab.playbook("drill-schedule.yml",
                               extra=schedule_vars(drills, tmp_path, "* * * * *", drill_schedule_state="absent"))
    assert removed.rc == 0 and not line.exists(), removed.output[-3000:]

    record = json.loads(last.read_text())
    assert record["status"] == "passed", record
    assert len(record["drills"]) == 1, record
    reports = tmp_path / "drills" / "pytest-thermal" / "reports"
    document = json.loads((reports / ("drill-%s.json" % record["drills"][0])).read_text())
    assert document["experiment"] == "gpu_thermal" and document["targets"] == [NODE]
    assert (reports / ("drill-%s.html" % record["drills"][0])).is_file()
    assert "starting at" in (tmp_path / "drills" / "pytest-thermal" / "drill.log").read_text()
    # The drill is over and rolled back: nothing of it left in the ledger; the reports stay.
    assert drills.ledger().get("drills", {}) == {} and drills.ledger().get("faults", {}) == {}
    assert not (tmp_path / "drills" / "pytest-thermal" / "schedule.json").exists()


def test_the_runner_skips_while_the_host_lock_is_held_and_refuses_a_busy_fleet(drills, tmp_path):
    lab = drills.lab
    variables = schedule_vars(drills, tmp_path, "0 3 * * 1", drill_schedule_cron_dir=str(tmp_path / "cron"))
    os.makedirs(tmp_path / "cron")
    written = lab.playbook("drill-schedule.yml", extra=variables)
    assert written.rc == 0, written.output[-4000:]
    base = tmp_path / "drills"
    config = base / "pytest-thermal" / "schedule.json"
    last = base / "pytest-thermal" / "reports" / "last-run.json"

    def run_now():
        done = subprocess.run([str(VENV_BIN / "python"), str(base / "bin" / "drill_run.py"), "--config", str(config)],
                              capture_output=True, text=True, timeout=600, check=False)
        return done, json.loads(last.read_text())

    # 1. Another scheduled drill of this host holds the lock: skipped, nothing run.
    with open(base / ".lock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        done, record = run_now()
    assert done.returncode == 0 and record["status"] == "skipped", (done.stdout, done.stderr)

    # 2. Another drill is active in the fleet (registered by its gate, on another node): refused, nothing injected.
    other = drills.module("chaos_gate", {
        "experiment": "gpu_thermal", "target": "gpu-a-003", "duration": 120, "allowed_nodes": ["gpu-a-003"],
        "kubeconfig": str(lab.kubeconfig), "namespace": "gpufleet-system", "lab_dir": str(lab.lab_dir),
        "slurm_conf": str(lab.slurm_conf), "blast_radius": {"max_nodes": 2, "max_percent": 100}})
    try:
        before = drills.node_snapshot(NODE)
        done, record = run_now()
        assert done.returncode == 0 and record["status"] == "refused", record
        assert "exclusive" in record["output_tail"] and other["drill"]["id"] in record["output_tail"]
        assert record["drills"] == []
        assert drills.node_snapshot(NODE) == before
    finally:
        drills.module("chaos_ledger", {
            "state": "finished", "drill_id": other["drill"]["id"], "kubeconfig": str(lab.kubeconfig),
            "namespace": "gpufleet-system"})
    assert drills.ledger().get("drills", {}) == {}


def test_the_systemd_backend_writes_units_systemd_accepts(drills, tmp_path):
    if shutil.which("systemd-analyze") is None:
        pytest.fail("systemd-analyze is missing: install the systemd package (bindep.txt)")
    lab = drills.lab
    variables = schedule_vars(drills, tmp_path, "Mon *-*-* 03:30:00", backend="systemd")
    os.makedirs(tmp_path / "systemd")
    written = lab.playbook("drill-schedule.yml", extra=variables)
    assert written.rc == 0, written.output[-4000:]
    units = [tmp_path / "systemd" / ("gpufleet-drill-pytest-thermal.%s" % kind) for kind in ("timer", "service")]
    verified = subprocess.run(["systemd-analyze", "verify", *map(str, units)], capture_output=True, text=True,
                              check=False)
    assert verified.returncode == 0, verified.stderr
    assert "OnCalendar=Mon *-*-* 03:30:00" in units[0].read_text()
    bad = lab.playbook("drill-schedule.yml", extra=schedule_vars(drills, tmp_path, "someday", backend="systemd"))
    assert bad.rc != 0 and "drill_schedule_drills[0].when" in bad.output
    assert "OnCalendar=Mon *-*-* 03:30:00" in units[0].read_text()  # the bad run wrote nothing
    gone = lab.playbook("drill-schedule.yml", extra=dict(variables, drill_schedule_state="absent"))
    assert gone.rc == 0 and not any(u.exists() for u in units)
