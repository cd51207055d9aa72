"""Each molecule scenario (converge, idempotence, verify, destroy) against the real lab daemons.

The scenarios live in extensions/molecule/<role>/ and use their own lab directory and ports,
so they run beside the session's test lab and beside each other: the module starts them two at
a time (GPUFLEET_MOLECULE_JOBS), longest first, and each test waits for its own scenario.
On two cores two at a time takes about 60 % of the serial time; the scenarios wait on daemons
as much as they compute.
"""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Dict, Iterator

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.lab]

REPO = Path(__file__).resolve().parents[2]
SCENARIOS = sorted(p.parent.name for p in (REPO / "extensions" / "molecule").glob("*/molecule.yml"))
# The slow ones first, so the last to finish is a short one (seconds each, from --durations).
LONGEST_FIRST = ["health_agent", "slurm", "kubernetes", "node_pool", "storage", "monitoring"]
JOBS = int(os.environ.get("GPUFLEET_MOLECULE_JOBS", "2"))


def run_scenario(scenario: str) -> subprocess.CompletedProcess:
    bin_dir = str(Path(sys.executable).parent)
    env = dict(os.environ, PATH=bin_dir + os.pathsep + os.environ.get("PATH", ""),
               ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0",
               PY_COLORS="0", NO_COLOR="1")
    subprocess.run([bin_dir + "/molecule", "reset", "-s", scenario], cwd=REPO / "extensions", env=env,
                   capture_output=True, check=False)
    return subprocess.run([bin_dir + "/molecule", "test", "-s", scenario], cwd=REPO / "extensions", env=env,
                          capture_output=True, text=True, timeout=1500, check=False)


@pytest.fixture(scope="module")
def scenario_runs() -> Iterator[Dict[str, Future]]:
    order = sorted(SCENARIOS, key=lambda s: LONGEST_FIRST.index(s) if s in LONGEST_FIRST else -1)
    with ThreadPoolExecutor(max_workers=max(1, JOBS)) as pool:
        yield {scenario: pool.submit(run_scenario, scenario) for scenario in order}


def test_every_role_with_a_lab_backend_has_a_scenario():
    assert {"kubernetes", "node_pool", "slurm", "monitoring", "health_agent"} <= set(SCENARIOS)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_molecule_scenario(scenario_runs, scenario):
    done = scenario_runs[scenario].result()
    assert done.returncode == 0, (done.stdout + done.stderr)[-8000:]
