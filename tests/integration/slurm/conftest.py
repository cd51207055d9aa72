"""The Slurm clusters the client tests run on: the test lab's Slurm 22.05, and a Slurm-only lab of
Slurm 26.05 (the Slurm of Slinky 1.2's images, run from a Debian forky root by the slurm role).

The 26.05 lab has its own directory and ports (30817, 31001-), so it runs beside the test lab and
`make lab`; it comes up the first time a test asks for it and goes down at the end of the session.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List

import pytest
from lab_harness import TEST_LAB_VARS, Lab, lab_processes, run_playbook

from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.client import SlurmClient
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.runner import SlurmRunner

HERE = Path(__file__).resolve().parent
SLURM_LAB_DIR = Path(os.environ.get("GPUFLEET_TEST_SLURM_LAB_DIR", "/var/tmp/gpufleet-pytest-slurm"))
SLURM_LAB_VARS: Dict[str, Any] = {
    "slurm_lab_version": "26.05",
    "slurm_slurmctld_port": 30817,
    "slurm_slurmd_port_base": 31001,
    "gpufleet_node_pools": TEST_LAB_VARS["gpufleet_node_pools"],
}
# Each version the lab runs, and where its cluster comes from.
VERSIONS = ["22.05", "26.05"]


@dataclass
class SlurmCluster:
    """One live cluster: its configuration, the lab's commands (<lab>/bin) and its version."""

    lab: Lab
    version: str

    @property
    def slurm_conf(self) -> Path:
        return self.lab.slurm_conf

    @property
    def bin_dir(self) -> Path:
        return self.lab.lab_dir / "bin"

    @property
    def pool(self) -> Dict[str, Any]:
        return self.lab.extra_vars["gpufleet_node_pools"][0]

    def client(self, check_mode: bool = False) -> SlurmClient:
        return SlurmClient(SlurmRunner(slurm_conf=str(self.slurm_conf), bin_dir=str(self.bin_dir), timeout=30,
                                       check_mode=check_mode))

    def command(self, name: str, *args: str) -> str:
        """Run one of the lab's Slurm commands (sbatch, scontrol, ...); its stdout, or AssertionError."""
        argv: List[str] = [str(self.bin_dir / name), *args]
        done = subprocess.run(argv, env=self.lab.env(), capture_output=True, text=True, timeout=60, check=False)
        if done.returncode != 0:
            raise AssertionError("%s failed (%d): %s" % (" ".join(argv), done.returncode, done.stderr))
        return done.stdout


def _run(the_lab: Lab, book: str):
    variables = dict(the_lab.extra_vars, gpufleet_lab_dir=str(the_lab.lab_dir))
    return run_playbook([str(HERE / "files" / book), "-e", json.dumps(variables)], the_lab.env())


@pytest.fixture(scope="session")
def slurm_lab() -> Lab:
    """The Slurm-only 26.05 lab (about 60 s the first time on a host: 35 s of them make its root)."""
    the_lab = Lab(lab_dir=SLURM_LAB_DIR, extra_vars=dict(SLURM_LAB_VARS))
    if SLURM_LAB_DIR.exists():
        _run(the_lab, "slurm-lab-down.yml")
        shutil.rmtree(SLURM_LAB_DIR)
    up = _run(the_lab, "slurm-lab-up.yml")
    if up.rc != 0:
        _run(the_lab, "slurm-lab-down.yml")
        pytest.fail("the Slurm 26.05 lab did not come up:\n" + up.output[-6000:])
    yield the_lab
    down = _run(the_lab, "slurm-lab-down.yml")
    left = lab_processes(SLURM_LAB_DIR)
    assert down.rc == 0, down.output[-4000:]
    assert not left, "processes left after the Slurm lab's teardown: %s" % left


@pytest.fixture(scope="module", params=VERSIONS)
def cluster(request, lab) -> SlurmCluster:
    """The cluster of each version in turn (the tests of one version run together)."""
    if request.param == "22.05":
        return SlurmCluster(lab=lab, version="22.05")
    return SlurmCluster(lab=request.getfixturevalue("slurm_lab"), version=request.param)
