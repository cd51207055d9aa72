"""The chaos_warden role's systemd backend, written to a staging directory and checked with
``systemd-analyze verify`` (no systemd runs here, so the unit is not started), and its bad input.

The warden itself, as the lab runs it, is tested in test_drills.py: a drill killed with its own
watchdog is rolled back by it at its expiry."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from lab_harness import REPO, VENV_BIN, run_playbook

from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.rest import mint_token

pytestmark = [pytest.mark.integration]

BOOK = Path(__file__).parent / "files" / "chaos-warden.yml"


def env():
    return dict(os.environ, PATH=str(VENV_BIN) + os.pathsep + os.environ.get("PATH", ""),
                ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"),
                ANSIBLE_NOCOLOR="1")


def run(variables):
    args = [str(BOOK)]
    for name, value in variables.items():
        args += ["-e", json.dumps({name: value}) if isinstance(value, dict) else "%s=%s" % (name, value)]
    return run_playbook(args, env(), timeout=300)


def test_the_systemd_unit_is_one_systemd_accepts_and_runs_the_warden(tmp_path):
    if shutil.which("systemd-analyze") is None:
        pytest.fail("systemd-analyze is missing: install the systemd package (bindep.txt)")
    ledger = tmp_path / "ledger.json"
    token = tmp_path / "token"  # what a Slinky site mounts from a Secret; read at start-up
    token.write_text(mint_token(b"k" * 32, "root", 600))
    token.chmod(0o600)
    written = run({"chaos_warden_backend": "systemd", "chaos_warden_systemd_dir": str(tmp_path),
                   "chaos_warden_systemd_start": "false", "chaos_warden_ledger_file": str(ledger),
                   "chaos_warden_systemd_python": str(VENV_BIN / "python"),
                   "chaos_warden_collections_path": str(REPO / "collections"), "chaos_warden_interval": 2,
                   # A Slinky site: the drills' Slurm jobs are cancelled through slurmrestd.
                   "chaos_warden_slurm_api": "rest",
                   "chaos_warden_slurm_rest": {"url": "https://slurm-restapi.slurm.svc:6820",
                                               "token_file": str(token)}})
    assert written.rc == 0, written.output[-3000:]
    unit = tmp_path / "gpufleet-chaos-warden.service"
    verified = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, check=False)
    assert verified.returncode == 0, verified.stderr
    text = unit.read_text()
    assert "Restart=always" in text and "--ledger-file %s" % ledger in text and "--interval 2" in text
    # The unit's command, run once here: the warden starts, sweeps the (empty) ledger and exits 0.
    command = next(line for line in text.splitlines() if line.startswith("ExecStart=")).split("=", 1)[1]
    once = subprocess.run(command + " --once", shell=True, capture_output=True, text=True, timeout=60, check=False,
                          env=dict(os.environ, PYTHONPATH=str(REPO / "collections")))
    assert once.returncode == 0 and '"event": "stopped"' in once.stdout, once.stdout + once.stderr
    assert '"slurm_api": "rest"' in once.stdout, once.stdout


@pytest.mark.parametrize("name, value", [("chaos_warden_interval", "0"), ("chaos_warden_grace", "-1"),
                                         ("chaos_warden_backend", "cron"), ("chaos_warden_namespace", "Bad_NS"),
                                         ("chaos_warden_slurm_api", "grpc")])
def test_bad_settings_name_their_variable_and_write_nothing(tmp_path, name, value):
    result = run({"chaos_warden_backend": "systemd", "chaos_warden_systemd_dir": str(tmp_path),
                  "chaos_warden_systemd_start": "false", name: value})
    assert result.rc != 0 and name in result.output, result.output[-2000:]
    assert list(tmp_path.iterdir()) == []


def test_an_unknown_slurm_rest_key_is_named_and_nothing_written(tmp_path):
    result = run({"chaos_warden_backend": "systemd", "chaos_warden_systemd_dir": str(tmp_path),
                  "chaos_warden_systemd_start": "false", "chaos_warden_slurm_api": "rest",
                  "chaos_warden_slurm_rest": {"url": "https://slurm-restapi:6820", "jwt_key": "/k"}})
    assert result.rc != 0 and "chaos_warden_slurm_rest takes only url, user" in result.output, result.output[-2000:]
    assert "jwt_key" in result.output and list(tmp_path.iterdir()) == []
