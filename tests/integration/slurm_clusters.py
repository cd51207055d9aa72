"""What the Slurm client tests share: each live cluster (SlurmCluster), the reason they write and a
poll with a deadline. conftest.py makes the clusters."""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List

from lab_harness import Lab

from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.client import SlurmClient
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.runner import SlurmRunner

# What an operator or the remediation may write: '|', 'Key=' words, '$' and '~' stay as written.
REASON = "gpufleet: Xid79 GPU-3 | State=DOWN $HOME ~ (remediation r-it)"
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


def wait_for(what: str, check: Callable[[], bool], timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("%s: not within %ss" % (what, timeout))
        time.sleep(0.3)
