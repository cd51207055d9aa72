"""`ansible-galaxy collection build` ships the collection and nothing of the build or test machinery."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
NEVER_SHIPPED = ("collections/", ".venv/", ".ansible/", ".ci/", ".pytest_cache/", ".ruff_cache/", ".hypothesis/",
                 ".import_linter_cache/", "tests/output/", "build/")


BIN = Path(sys.executable).parent


def build(into: Path) -> Path:
    subprocess.run([str(BIN / "ansible-galaxy"), "collection", "build", "--output-path", str(into), str(REPO)],
                   check=True, capture_output=True)
    (tarball,) = into.glob("gpufleet-resilience-*.tar.gz")
    return tarball


def test_built_tarball_holds_the_collection_without_caches(tmp_path):
    tarball = build(tmp_path)
    with tarfile.open(tarball) as archive:
        names = archive.getnames()
    assert "MANIFEST.json" in names and "plugins/modules/gpu_health.py" in names
    assert "roles/slurm/tasks/main.yml" in names and "playbooks/one-click-slurm.yml" in names
    leaked = [name for name in names if name.startswith(NEVER_SHIPPED) or "/__pycache__/" in name]
    assert leaked == []


def test_every_playbook_runs_by_its_collection_name_from_the_installed_tarball(tmp_path):
    """`ansible-playbook gpufleet.resilience.<name>` needs a name that is a Python identifier: the
    playbooks are named with underscores, the hyphenated paths the docs use import them."""
    tarball = build(tmp_path)
    installed = tmp_path / "collections"
    config = tmp_path / "ansible.cfg"
    config.write_text("[defaults]\n")
    # Nothing of this checkout: ansible-galaxy would find the collection installed here and skip it.
    env = {key: value for key, value in os.environ.items() if not key.startswith("ANSIBLE_") and key != "PYTHONPATH"}
    env.update(ANSIBLE_CONFIG=str(config), ANSIBLE_COLLECTIONS_PATH=str(installed))
    subprocess.run([str(BIN / "ansible-galaxy"), "collection", "install", "--no-deps", "-p", str(installed),
                    str(tarball)], check=True, capture_output=True, cwd=tmp_path, env=env)
    playbooks = REPO / "playbooks"
    names = [p.stem for p in sorted(playbooks.glob("*.yml")) if "-" not in p.stem]
    names += ["drills." + p.stem for p in sorted((playbooks / "drills").glob("*.yml"))]
    # Each hyphenated path is kept for the docs and imports its underscore twin.
    for path in playbooks.glob("*-*.yml"):
        twin = path.stem.replace("-", "_")
        assert twin in names and "import_playbook: %s.yml" % twin in path.read_text(), path
    assert "one_click_slurm" in names and "remediate_node" in names and "drills.gpu_xid" in names
    checked = subprocess.run([str(BIN / "ansible-playbook"), "--syntax-check", "-i", "localhost,"]
                             + ["gpufleet.resilience." + name for name in names],
                             cwd=tmp_path, env=env, capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stdout[-3000:] + checked.stderr[-3000:]
    found = re.findall(r"^playbook: (.+)$", checked.stdout, re.M)
    # Each one from the installed copy, not from this checkout.
    assert len(found) == len(names) and all(path.startswith(str(installed)) for path in found), found
