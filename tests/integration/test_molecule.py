"""Each molecule scenario (converge, idempotence, verify, destroy) against the real lab daemons.

The scenarios live in extensions/molecule/<role>/ and use their own lab directory
and ports, so they run beside the session's test lab.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.lab]

REPO = Path(__file__).resolve().parents[2]
SCENARIOS = sorted(p.parent.name for p in (REPO / "extensions" / "molecule").glob("*/molecule.yml"))


def test_every_role_with_a_lab_backend_has_a_scenario():
    assert {"kubernetes", "node_pool", "slurm", "monitoring", "health_agent"} <= set(SCENARIOS)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_molecule_scenario(scenario):
    bin_dir = str(Path(sys.executable).parent)
    env = dict(os.environ, PATH=bin_dir + os.pathsep + os.environ.get("PATH", ""),
               ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0",
               PY_COLORS="0", NO_COLOR="1")
    subprocess.run([bin_dir + "/molecule", "reset", "-s", scenario], cwd=REPO / "extensions", env=env,
                   capture_output=True, check=False)
    done = subprocess.run([bin_dir + "/molecule", "test", "-s", scenario], cwd=REPO / "extensions", env=env,
                          capture_output=True, text=True, timeout=1200, check=False)
    assert done.returncode == 0, (done.stdout + done.stderr)[-8000:]
