"""`ansible-galaxy collection build` ships the collection and nothing of the build or test machinery."""

from __future__ import annotations

import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
NEVER_SHIPPED = ("collections/", ".venv/", ".ansible/", ".ci/", ".pytest_cache/", ".ruff_cache/", ".hypothesis/",
                 ".import_linter_cache/", "tests/output/", "build/")


def test_built_tarball_holds_the_collection_without_caches(tmp_path):
    galaxy = Path(sys.executable).parent / "ansible-galaxy"
    subprocess.run([str(galaxy), "collection", "build", "--output-path", str(tmp_path), str(REPO)],
                   check=True, capture_output=True)
    (tarball,) = tmp_path.glob("gpufleet-resilience-*.tar.gz")
    with tarfile.open(tarball) as archive:
        names = archive.getnames()
    assert "MANIFEST.json" in names and "plugins/modules/gpu_health.py" in names
    assert "roles/slurm/tasks/main.yml" in names and "playbooks/one-click-slurm.yml" in names
    leaked = [name for name in names if name.startswith(NEVER_SHIPPED) or "/__pycache__/" in name]
    assert leaked == []
