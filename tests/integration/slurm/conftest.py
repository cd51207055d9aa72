"""The Slurm clusters the client tests run on: the test lab's Slurm 22.05, and a Slurm-only lab of
Slurm 26.05 (the Slurm of Slinky 1.2's images, run from a Debian forky root by the slurm role).

The 26.05 lab has its own directory and ports (slurmctld 30817, slurmrestd 30820, slurmd 31001-, all
shifted by GPUFLEET_TEST_LAB_PORT_OFFSET), so it runs beside the test lab and `make lab`; it comes up
the first time a test asks for it (slurmrestd included) and goes down at the end of the session.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, Dict

import pytest
from lab_harness import PORT_OFFSET, TEST_LAB_VARS, Lab, lab_processes, run_playbook
from slurm_clusters import VERSIONS, SlurmCluster

HERE = Path(__file__).resolve().parent
SLURM_LAB_DIR = Path(os.environ.get("GPUFLEET_TEST_SLURM_LAB_DIR", "/var/tmp/gpufleet-pytest-slurm"))
SLURM_LAB_VARS: Dict[str, Any] = {
    "slurm_lab_version": "26.05",
    "slurm_slurmctld_port": 30817 + PORT_OFFSET,
    "slurm_slurmd_port_base": 31001 + PORT_OFFSET,
    "slurm_slurmrestd_port": 30820 + PORT_OFFSET,
    "gpufleet_node_pools": TEST_LAB_VARS["gpufleet_node_pools"],
}


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
