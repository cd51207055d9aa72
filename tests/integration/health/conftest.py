"""Fixtures for running the health modules in real ansible-playbook runs against the fake NVML."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

import ansible_runner
import pytest
import yaml
from lab_harness import REPO

from ansible_collections.gpufleet.resilience.plugins.module_utils.lab import fake_gpu_state

# ansible-runner looks ansible-playbook up on PATH: use the one beside this Python.
os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")


@pytest.fixture
def gpu_node(tmp_path: Path) -> Path:
    """A simulated node with 8 healthy H100s."""
    state_dir = tmp_path / "gpus" / "gpu-a-001"
    fake_gpu_state.init(str(state_dir), count=8, node="gpu-a-001", product="NVIDIA-H100-80GB-HBM3")
    return state_dir


@dataclass
class PlaybookRun:
    rc: int
    status: str
    results: dict  # task name -> module result
    stdout: str


@pytest.fixture
def run_tasks(tmp_path: Path, fake_nvml_lib: Path):
    """Run a list of tasks on localhost with ansible-playbook, the fake NVML in its environment."""

    def run(tasks: list, state_dir: Path, **runner_kwargs) -> PlaybookRun:
        private = tmp_path / "runner"
        (private / "project").mkdir(parents=True, exist_ok=True)
        play = [{
            "name": "health check",
            "hosts": "localhost",
            "gather_facts": False,
            "environment": {
                "LD_LIBRARY_PATH": str(fake_nvml_lib.parent),
                "GPUFLEET_FAKE_NVML_DIR": str(state_dir),
            },
            "tasks": tasks,
        }]
        (private / "project" / "play.yml").write_text(yaml.safe_dump(play, sort_keys=False))
        runner = ansible_runner.run(
            private_data_dir=str(private),
            playbook="play.yml",
            inventory="localhost ansible_connection=local ansible_python_interpreter=" + sys.executable,
            envvars={
                "ANSIBLE_COLLECTIONS_PATH": str(REPO / "collections"),
                "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
            },
            quiet=True,
            **runner_kwargs,
        )
        results = {}
        for event in runner.events:
            if event.get("event") in ("runner_on_ok", "runner_on_failed"):
                data = event["event_data"]
                results[data["task"]] = dict(data["res"], _failed=event["event"] == "runner_on_failed")
        return PlaybookRun(rc=runner.rc, status=runner.status, results=results, stdout=runner.stdout.read())

    return run
