"""The Slurm clusters the client tests run on: the test lab's Slurm 22.05, and the Slurm-only lab of
Slurm 26.05 (``slurm_lab``, tests/integration/conftest.py)."""

from __future__ import annotations

import pytest
from slurm_clusters import VERSIONS, SlurmCluster


@pytest.fixture(scope="module", params=VERSIONS)
def cluster(request, lab, slurm_lab) -> SlurmCluster:
    """The cluster of each version in turn (the tests of one version run together). Both labs are
    named here, not looked up: under xdist a module's unit of work follows the labs its fixtures
    name (tests/integration/conftest.py), and the 26.05 lab is one per run."""
    if request.param == "22.05":
        return SlurmCluster(lab=lab, version="22.05")
    return SlurmCluster(lab=slurm_lab, version=request.param)
