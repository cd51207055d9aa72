"""Integration fixtures shared by every integration test."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from lab_harness import REPO, TEST_LAB_VARS, Lab, lab_processes

CACHE_DIR = Path(os.environ.get("GPUFLEET_CACHE_DIR") or Path.home() / ".cache" / "gpufleet")


@pytest.fixture(scope="session")
def fake_nvml_lib() -> Path:
    """Build the fake libnvidia-ml.so.1 (a no-op when up to date); a build failure fails the tests."""
    subprocess.run(["make", "--no-print-directory", "-s", "-C", str(REPO / "tools" / "fake-nvml"),
                    f"GPUFLEET_CACHE_DIR={CACHE_DIR}"], check=True)
    lib = CACHE_DIR / "fake-nvml" / "libnvidia-ml.so.1"
    assert lib.is_file()
    return lib


@pytest.fixture(scope="session")
def lab() -> Lab:
    """The lab, brought up once per session with playbooks/one-click-slurm.yml and taken down at the end.

    Later issues' integration tests use it too. Teardown runs playbooks/lab-down.yml
    and fails the session if any process of the lab is left.
    """
    lab_dir = Path(os.environ.get("GPUFLEET_TEST_LAB_DIR", "/var/tmp/gpufleet-pytest-lab"))
    the_lab = Lab(lab_dir=lab_dir, extra_vars=dict(TEST_LAB_VARS))
    # Development only: GPUFLEET_TEST_LAB_KEEP=1 reuses a running test lab and leaves it up.
    if os.environ.get("GPUFLEET_TEST_LAB_KEEP") == "1":
        if not (lab_dir / "run" / "kube-apiserver.pid").exists():
            up = the_lab.playbook("one-click-slurm.yml")
            assert up.rc == 0, up.output[-6000:]
        yield the_lab
        return
    if lab_dir.exists():
        # A previous session that died: stop what its records name, then start clean.
        the_lab.playbook("lab-down.yml")
        shutil.rmtree(lab_dir)
    up = the_lab.playbook("one-click-slurm.yml")
    if up.rc != 0:
        the_lab.playbook("lab-down.yml")
        pytest.fail("the lab did not come up:\n" + up.output[-6000:])
    yield the_lab
    down = the_lab.playbook("lab-down.yml")
    left = lab_processes(lab_dir)
    assert down.rc == 0, down.output[-4000:]
    assert not left, "processes left after lab-down: %s" % left
