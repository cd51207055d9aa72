"""Fixtures for the Slinky tests: the upstream charts (test data outside the repo) and helm."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from lab_harness import REPO
from slinky_helpers import CACHE_DIR, CHART_VERSIONS, VENDOR, chart_dir


@pytest.fixture(scope="session")
def vendor_charts() -> Path:
    if not all((chart_dir(v) / "slurm" / "Chart.yaml").is_file() for v in CHART_VERSIONS):
        pytest.skip(
            "the Slinky charts are not at %s (v1.1.2/helm and v1.2.1/helm of SchedMD's slurm-operator); "
            "CI has them" % VENDOR
        )
    return VENDOR


@pytest.fixture(scope="session")
def helm() -> str:
    """helm 3 from the cache, built by tools/build-go-binaries.sh when missing (a no-op when up
    to date; `make setup` builds it). A failed build fails the tests."""
    subprocess.run(
        [str(REPO / "tools" / "build-go-binaries.sh"), "helm"],
        check=True,
        env=dict(os.environ, GPUFLEET_CACHE_DIR=str(CACHE_DIR)),
        capture_output=True,
        timeout=1800,
    )
    binary = CACHE_DIR / "bin" / "helm"
    assert binary.is_file()
    return str(binary)
