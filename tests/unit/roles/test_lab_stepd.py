"""lab_stepd: finds a step daemon through its spool socket and stops it and its job by PID.

The step daemon here is a stand-in with slurmstepd's traits that matter: its own session, a
listening Unix socket named like a step's in a spool directory, SIGTERM ignored, and a job
process in its session. The molecule scenario `slurm` runs the same code against a real
slurmstepd.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "roles" / "slurm" / "files" / "lab_stepd.py"

FAKE_STEPD = r"""
import os, signal, socket, subprocess, sys, time
os.setsid()
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # slurmstepd ignores SIGTERM too
server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
server.bind(sys.argv[1])
server.listen(1)
job = subprocess.Popen(["sleep", "600"], close_fds=True)
print(job.pid, flush=True)
while True:
    time.sleep(1)
"""


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def run(*argv: str) -> dict:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), *argv], capture_output=True, text=True, timeout=60, check=True
    )
    return json.loads(result.stdout)


@pytest.fixture
def short_tmp():
    # A Unix socket path must fit in 108 bytes; ansible-test's tmp_path does not.
    path = Path(tempfile.mkdtemp(prefix="stepd-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def step_daemon(short_tmp: Path):
    tmp_path = short_tmp
    spool = tmp_path / "spool" / "gpu-a-001"
    spool.mkdir(parents=True)
    sock = spool / "gpu-a-001_7.4294967291"
    daemon = subprocess.Popen([sys.executable, "-c", FAKE_STEPD, str(sock)], stdout=subprocess.PIPE, text=True)
    job_pid = int(daemon.stdout.readline())
    deadline = time.monotonic() + 10
    while not sock.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    yield tmp_path / "spool", sock, daemon, job_pid
    for pid in (job_pid, daemon.pid):
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
    daemon.wait(timeout=10)


def test_list_finds_the_daemon_and_its_job(step_daemon) -> None:
    spool, sock, daemon, job_pid = step_daemon
    found = run("list", "--spool-dir", str(spool), "--stepd-exe", sys.executable)["step_daemons"]
    assert [(d["socket"], d["pid"]) for d in found] == [(str(sock), daemon.pid)]
    assert job_pid in found[0]["job_pids"]
    assert daemon.pid not in found[0]["job_pids"]


def test_relative_spool_path_is_resolved(step_daemon) -> None:
    spool, _sock, daemon, _job = step_daemon
    relative = os.path.relpath(spool)
    found = run("list", "--spool-dir", relative, "--stepd-exe", sys.executable)["step_daemons"]
    assert [d["pid"] for d in found] == [daemon.pid]


def test_a_socket_held_by_another_program_is_left_alone(step_daemon) -> None:
    spool, _sock, daemon, job_pid = step_daemon
    result = run("stop", "--spool-dir", str(spool), "--stepd-exe", "/usr/bin/true")
    assert result["step_daemons"] == []
    assert alive(daemon.pid) and alive(job_pid)


def test_stop_terminates_the_job_then_kills_the_daemon(step_daemon) -> None:
    spool, sock, daemon, job_pid = step_daemon
    result = run("stop", "--spool-dir", str(spool), "--stepd-exe", sys.executable, "--grace", "5")
    assert [d["pid"] for d in result["step_daemons"]] == [daemon.pid]
    assert not alive(job_pid)
    assert daemon.wait(timeout=10) == -signal.SIGKILL
    assert not sock.exists()
    assert run("list", "--spool-dir", str(spool), "--stepd-exe", sys.executable)["step_daemons"] == []


def test_missing_spool_directory_finds_nothing(tmp_path: Path) -> None:
    assert run("stop", "--spool-dir", str(tmp_path / "absent"))["step_daemons"] == []
