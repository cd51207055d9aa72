"""Fixtures for the Slinky tests: the upstream charts (tests/fixtures/slinky) and helm."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from lab_harness import REPO
from slinky_helpers import CACHE_DIR, unpack_charts


@pytest.fixture(scope="session")
def vendor_charts() -> Path:
    """SchedMD's charts, unpacked from the repository's fixtures."""
    return unpack_charts()


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
