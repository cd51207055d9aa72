"""Each molecule scenario (destroy, converge, verify, destroy; idempotence too where a backend runs
nowhere else) against the real lab daemons.

No `syntax` step: ansible-lint syntax-checks every scenario's playbooks (test_ansible_lint.py). No
`idempotence` step for the roles whose lab backend is all a scenario converges (kubernetes, slurm,
node_pool, monitoring): test_lab.py's one-click rerun runs each of them a second time on the session
lab and asserts `changed=0`. health_agent (its systemd and daemonset backends) and storage (its PVC
backend) keep theirs: one-click runs those backends nowhere. docs/testing.md has the time saved.

The scenarios live in extensions/molecule/<role>/ and use their own lab directory and ports,
so they run beside the session's test lab: in one process they start in the background when the
session's collection is done (lab_harness.Background, from the conftest), longest first, and each
test waits for its own scenario; under xdist each is a unit of work of its own (tests/conftest.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest
from lab_harness import Background

pytestmark = [pytest.mark.integration, pytest.mark.lab]

REPO = Path(__file__).resolve().parents[2]
SCENARIOS = sorted(p.parent.name for p in (REPO / "extensions" / "molecule").glob("*/molecule.yml"))
# The slow ones first, so the last to finish is a short one (seconds each, from --durations).
LONGEST_FIRST = ["health_agent", "slurm", "kubernetes", "node_pool", "storage", "monitoring"]


def run_scenario(scenario: str) -> subprocess.CompletedProcess:
    bin_dir = str(Path(sys.executable).parent)
    env = dict(os.environ, PATH=bin_dir + os.pathsep + os.environ.get("PATH", ""),
               ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0",
               PY_COLORS="0", NO_COLOR="1")
    subprocess.run([bin_dir + "/molecule", "reset", "-s", scenario], cwd=REPO / "extensions", env=env,
                   capture_output=True, check=False)
    return subprocess.run([bin_dir + "/molecule", "test", "-s", scenario], cwd=REPO / "extensions", env=env,
                          capture_output=True, text=True, timeout=1500, check=False)


def start_in_background(items: List[pytest.Item]) -> None:
    """The conftest's collection hook: start the selected scenarios now, longest first."""
    selected = {item.callspec.params["scenario"] for item in items if hasattr(item, "callspec")}
    for scenario in sorted(selected, key=lambda s: LONGEST_FIRST.index(s) if s in LONGEST_FIRST else -1):
        Background.submit("molecule:" + scenario, lambda s=scenario: run_scenario(s))


def test_every_role_with_a_lab_backend_has_a_scenario():
    assert {"kubernetes", "node_pool", "slurm", "monitoring", "health_agent"} <= set(SCENARIOS)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_molecule_scenario(scenario):
    done = Background.result("molecule:" + scenario, lambda: run_scenario(scenario))
    assert done.returncode == 0, (done.stdout + done.stderr)[-8000:]
